"""RowParallelLinearForBiasedExperts replaces: the down projection Megatron-Core 0.19.2's local
spec gives SequentialMLP experts (RowParallelLinear), for experts with biases (GPT-OSS).

An expert's MLP adds its down-projection bias to the output in place (`output += bias * scale`,
megatron/core/transformer/mlp.py). With expert tensor parallel 1 (the only size Megatron builds
biased experts at) the linear's TP reduction returns its input as is, from inside an autograd
Function, and autograd refuses an in-place change of such an output while training
("... is a view and is being modified inplace"). This linear hands back a copy instead: the same
values, a tensor the in-place add may change."""
from __future__ import annotations

from megatron.core.tensor_parallel.layers import RowParallelLinear


class RowParallelLinearForBiasedExperts(RowParallelLinear):
    def forward(self, input_, *args, **kwargs):
        output, bias = super().forward(input_, *args, **kwargs)
        return output.clone(), bias


def use_in(layer_spec) -> None:
    """Put it into a local MoE layer spec's routed experts."""
    experts = layer_spec.submodules.mlp.keywords["submodules"].experts
    experts.keywords["submodules"].linear_fc2 = RowParallelLinearForBiasedExperts
