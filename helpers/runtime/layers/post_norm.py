"""RowParallelLinearWithPostNorm replaces: Megatron-Bridge's TERowParallelLinearLayerNorm (a TE
module): Gemma 2/3 normalise the attention output and the MLP output again before the residual
add ("sandwich" norms: post_attention_layernorm, post_feedforward_layernorm). Megatron's
TransformerLayer has no slot for them, so, as Bridge does, the norm lives inside the row-parallel
output projection, after its TP reduction: the parameter is `linear_proj.post_layernorm.weight`
(`linear_fc2.post_layernorm.weight`), the names Bridge maps. Under SP the reduction scatters the
sequence, so the norm sees a slice and its weight is marked sequence_parallel (the kit's norm)."""
from __future__ import annotations

from megatron.core.tensor_parallel.layers import RowParallelLinear

from helpers.runtime.layers.norm import SequenceParallelNorm


class RowParallelLinearWithPostNorm(RowParallelLinear):
    def __init__(self, input_size, output_size, *, config, **kwargs):
        super().__init__(input_size, output_size, config=config, **kwargs)
        self.post_layernorm = SequenceParallelNorm(config, output_size, eps=config.layernorm_epsilon)

    def forward(self, input_, *args, **kwargs):
        output, bias = super().forward(input_, *args, **kwargs)
        if bias is not None:
            output, bias = output + bias, None
        return self.post_layernorm(output), bias


def use_in(layer_spec) -> None:
    """The attention's and the dense MLP's output projections of a local layer spec."""
    layer_spec.submodules.self_attention.submodules.linear_proj = RowParallelLinearWithPostNorm
    mlp = layer_spec.submodules.mlp  # a ModuleSpec, or a functools.partial holding the submodules
    (mlp.keywords["submodules"] if hasattr(mlp, "keywords") else mlp.submodules).linear_fc2 = \
        RowParallelLinearWithPostNorm
