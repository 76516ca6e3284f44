"""Megatron-Core's dense MLP with FC1, GeLU and FC2 run as one FP8 Function under the delayed
recipe (helpers/precision/fp8_gelu_mlp.py: GeLU and the FP8 cast after it fused, both directions).

`FusedGeluFP8MLP` is Megatron's MLP class with only `forward` replaced, and only where the fusion
applies: plain GeLU (not gated, not TE's activation module), no linear biases, no per-token scale,
both linears the kit's FP8 ones with the delayed recipe (fp8_linear.linears("delayed")). Anything
else runs Megatron's own forward. Weights, initialisation, sharding and checkpoints are Megatron's
(the submodules are unchanged). The tensor-parallel communication around the two GEMMs is
what Megatron's linears do, with Megatron's own autograd mappings: FC1's input is gathered over
TP under sequence parallelism (its gradient reduce-scattered) or else enters TP with its gradient
all-reduced; FC2's partial outputs are reduce-scattered (SP) or all-reduced; between the two
linears there is no communication (FC1 column-parallel without gathering its output, FC2
row-parallel on the parallel input)."""
from __future__ import annotations

import torch
from megatron.core.tensor_parallel.mappings import (
    copy_to_tensor_model_parallel_region,
    gather_from_sequence_parallel_region,
    reduce_from_tensor_model_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
)
from megatron.core.transformer.mlp import MLP

from helpers.precision.fp8_gelu_mlp import fp8_gelu_mlp
from helpers.runtime.fp8_linear import delayed_streams, linears


class FusedGeluFP8MLP(MLP):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gelu_fused = fusable(self)

    def forward(self, hidden_states, per_token_scale=None, **kwargs):
        if not self.gelu_fused or per_token_scale is not None:
            return super().forward(hidden_states, per_token_scale, **kwargs)
        fc1, fc2 = self.linear_fc1, self.linear_fc2
        if fc1.sequence_parallel:
            x = gather_from_sequence_parallel_region(hidden_states, tensor_parallel_output_grad=True,
                                                     group=fc1.tp_group)
        else:
            x = copy_to_tensor_model_parallel_region(hidden_states, group=fc1.tp_group)
        y = fp8_gelu_mlp(x, fc1.weight, fc2.weight, delayed_streams(fc1), delayed_streams(fc2))
        if fc2.sequence_parallel:
            return reduce_scatter_to_sequence_parallel_region(y, group=fc2.tp_group), None
        return reduce_from_tensor_model_parallel_region(y, group=fc2.tp_group), None


def fusable(mlp: MLP) -> bool:
    """Whether the MLP is the case FusedGeluFP8MLP fuses (see the module's docstring)."""
    column, row = linears("delayed")
    c, fc1, fc2 = mlp.config, mlp.linear_fc1, mlp.linear_fc2
    return (type(fc1) is column and type(fc2) is row and c.activation_func is torch.nn.functional.gelu
            and not c.gated_linear_unit and not c.use_te_activation_func and not c.add_bias_linear
            and fc1.bias is None and fc2.bias is None and not fc1.gather_output and fc2.input_is_parallel
            and not fc1.explicit_expert_comm and not fc2.explicit_expert_comm and not fc1.disable_grad_reduce
            and not c.defer_embedding_wgrad_compute and c._cpu_offloading_context is None)


def use_in(layer_spec) -> bool:
    """Build the layer's dense MLP as FusedGeluFP8MLP (after fp8_linear.use_in swapped its
    linears; layer_specs does both for precision='fp8' with the delayed recipe). Returns whether
    the layer had a dense MLP; MoE layers keep theirs."""
    from functools import partial

    from megatron.core.transformer.spec_utils import ModuleSpec

    mlp = layer_spec.submodules.mlp
    if isinstance(mlp, partial) and getattr(mlp.func, "__self__", None) is MLP:
        layer_spec.submodules.mlp = partial(FusedGeluFP8MLP.as_mlp_submodule, *mlp.args, **mlp.keywords)
        return True
    if isinstance(mlp, ModuleSpec) and mlp.module is MLP:
        mlp.module = FusedGeluFP8MLP
        return True
    return False
