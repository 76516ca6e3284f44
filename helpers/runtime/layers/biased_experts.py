"""RowParallelLinearForBiasedExperts replaces: the down projection Megatron-Core 0.19.2's local
spec gives SequentialMLP experts (RowParallelLinear), for experts with biases (GPT-OSS).

An expert's MLP adds its down-projection bias to the output in place (`output += bias * scale`,
megatron/core/transformer/mlp.py). With expert tensor parallel 1 (the only size Megatron builds
biased experts at) the linear's TP reduction returns its input as is, from inside an autograd
Function, and autograd refuses an in-place change of such an output while training
("... is a view and is being modified inplace"). This linear hands back a copy instead: the same
values, a tensor the in-place add may change.

And its bias is not marked `sequence_parallel`. RowParallelLinear marks its bias so whenever the
config has sequence parallelism: a dense layer's output is reduce-scattered over the sequence, so
each TP rank's bias gradient covers its slice only and finalize_model_grads sums it over TP. An
expert's linear skips that reduce-scatter (it sees whole tokens), and its gradients, weight and
bias alike, are already summed over the ranks holding that expert by DDP's expert-data-parallel
reduction; a TP sum on top doubled the bias gradient at TP=2+SP (measured against transformers:
every expert down-projection bias gradient 2x, the rest within 3e-6), which put the first gradient
norm 3% off one process."""
from __future__ import annotations

from megatron.core.tensor_parallel.layers import RowParallelLinear


class RowParallelLinearForBiasedExperts(RowParallelLinear):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.bias is not None:
            self.bias.sequence_parallel = False  # complete after the expert-data-parallel reduction

    def forward(self, input_, *args, **kwargs):
        output, bias = super().forward(input_, *args, **kwargs)
        return output.clone(), bias


def use_in(layer_spec) -> None:
    """Put it into a local MoE layer spec's routed experts."""
    experts = layer_spec.submodules.mlp.keywords["submodules"].experts
    experts.keywords["submodules"].linear_fc2 = RowParallelLinearForBiasedExperts
