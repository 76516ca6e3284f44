"""Megatron-Core's dense MLP with its GeLU fused into the FP8 casts (Transformer Engine's
LayerNormMLP does the same with its own kernels; the kit's is helpers/precision/fp8_gelu_mlp.py).

Megatron's MLP is kept: its two linears (the kit's FP8 column- and row-parallel linears,
fp8_linear.py), their weights, initialisation, sharding and checkpoints. Only `forward` is
overridden, and only where the fusion applies: the delayed recipe, GeLU, no gated unit, no linear
biases, no expert scaling. It does the same communication as the two linears would, with
Megatron's own autograd mappings on the same TP group: the column-parallel input (gathered under
sequence parallel, its gradient all-reduced without it) and the row-parallel output (reduce-scattered
under sequence parallel, all-reduced without it). Anything else runs Megatron's forward unchanged.
On CPU, a two-layer GPT from the kit's spec trains bit for bit as with Megatron's MLP, at TP=1
(tests/unit/test_fp8_linear.py) and at TP=2 with and without SP (tests/unit/test_fp8_mlp_tp.py)."""
from __future__ import annotations

from functools import partial

import torch.nn.functional as F
from megatron.core.tensor_parallel.mappings import (
    reduce_from_tensor_model_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
)
from megatron.core.transformer.mlp import MLP

from helpers.precision.fp8_gelu_mlp import fp8_gelu_mlp
from helpers.runtime.layers.fp8_linear import column_parallel_input, delayed_streams, is_dense_mlp


class FP8GeluMLP(MLP):
    def fuses(self, per_token_scale) -> bool:
        """Whether forward runs the fused FP8 MLP (else Megatron's own)."""
        fc1, fc2, config = self.linear_fc1, self.linear_fc2, self.config
        return (getattr(fc1, "fp8_recipe", None) == "delayed" and getattr(fc2, "fp8_recipe", None) == "delayed"
                and self.activation_func is F.gelu and not config.gated_linear_unit
                and not config.use_te_activation_func and fc1.bias is None and fc2.bias is None
                and per_token_scale is None and not fc1.explicit_expert_comm and not fc2.explicit_expert_comm
                and not fc1.disable_grad_reduce and fc1.gradient_accumulation_fusion == fc2.gradient_accumulation_fusion)

    def forward(self, hidden_states, per_token_scale=None, **kwargs):
        if not self.fuses(per_token_scale):
            return super().forward(hidden_states, per_token_scale=per_token_scale, **kwargs)
        fc1, fc2 = self.linear_fc1, self.linear_fc2
        x = column_parallel_input(hidden_states, fc1.sequence_parallel, True, fc1.tp_group)
        out = fp8_gelu_mlp(x, fc1.weight, fc2.weight, delayed_streams(fc1), delayed_streams(fc2),
                           accumulate=fc1.gradient_accumulation_fusion)
        if fc2.sequence_parallel:
            return reduce_scatter_to_sequence_parallel_region(out, group=fc2.tp_group), None
        return reduce_from_tensor_model_parallel_region(out, group=fc2.tp_group), None


def use_in(layer_spec, recipe: str) -> bool:
    """Make a local-spec layer's dense MLP the fused one under the delayed recipe (after fp8_linear.use_in
    gave it FP8 linears). Returns whether it did: not for MoE layers or other recipes."""
    mlp = layer_spec.submodules.mlp
    if recipe != "delayed" or not is_dense_mlp(mlp):
        return False
    if isinstance(mlp, partial):
        layer_spec.submodules.mlp = partial(FP8GeluMLP.as_mlp_submodule, *mlp.args, **mlp.keywords)
    else:
        mlp.module = FP8GeluMLP
    return True
