"""FP8 training on the local backend (no Transformer Engine): Megatron-Core's column- and
row-parallel linears with their local GEMM replaced by the kit's FP8 GEMMs
(helpers/precision/fp8_matmul.py, on `torch._scaled_mm`).

Only `_forward_impl` is overridden, the method Megatron's linears call for the local matrix
multiply (`linear_with_grad_accumulation_and_async_allreduce`). Everything around it stays
Megatron's: weights, initialisation, sharding, checkpoints, the output all-reduce or
reduce-scatter of the row-parallel linear. The communication Megatron's GEMM function does inside
itself is done here with Megatron's own autograd mappings, the same collectives on the same
group: sequence parallel gathers the input over TP in forward and reduce-scatters its gradient in
backward (`gather_from_sequence_parallel_region`); without SP a column-parallel linear all-reduces
its input gradient (`copy_to_tensor_model_parallel_region`). One difference: Megatron overlaps
those backward collectives with the weight-gradient GEMM (async handles); here they run after it.

Which linears: every ColumnParallelLinear/RowParallelLinear of the attention and dense MLP blocks
(QKV, output projection, FC1, FC2). The embedding, core attention, norms, MoE experts and the
router stay bf16, as in Transformer Engine's FP8 recipes, where attention's softmax is not FP8
either. The output layer (logits) stays bf16 too unless the job asks for it
(JobSpec.fp8_output_layer, `use_in_output_layer`): it is ~7% of the 1.4B GPT's GEMM work, and its
input gradient, the softmax's, spans the widest range of any (e5m2 keeps 32 binades of it)."""
from __future__ import annotations

from functools import cache, partial

from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from megatron.core.tensor_parallel.mappings import (
    copy_to_tensor_model_parallel_region,
    gather_from_sequence_parallel_region,
)

from helpers.job.spec import FP8_LINEARS
from helpers.precision.fp8_matmul import DelayedStreams, fp8_matmul


def local_fp8_linear(recipe, streams, input, weight, bias, gradient_accumulation_fusion, allreduce_dgrad,
                     sequence_parallel, tp_group=None, **_unused):
    """Megatron's `linear_with_grad_accumulation_and_async_allreduce` contract with FP8 GEMMs:
    with `gradient_accumulation_fusion` the weight gradient goes into `weight.main_grad` (fp32) as in
    Megatron's and TE's linears. (The deferred embedding-wgrad buffers and GTP it also takes are not
    used by these linears.)"""
    input = column_parallel_input(input, sequence_parallel, allreduce_dgrad, tp_group)
    output = fp8_matmul(input, weight, recipe, streams, accumulate=gradient_accumulation_fusion)
    return output + bias if bias is not None else output


def column_parallel_input(input, sequence_parallel: bool, all_reduce_grad: bool, group):
    """A column-parallel GEMM's input, as Megatron's GEMM function prepares it inside itself: gathered
    over TP under sequence parallel (its gradient reduce-scattered), else, with `all_reduce_grad`, its
    gradient all-reduced over TP (identity forward)."""
    if sequence_parallel:
        return gather_from_sequence_parallel_region(input, tensor_parallel_output_grad=True, group=group)
    if all_reduce_grad:
        return copy_to_tensor_model_parallel_region(input, group=group)
    return input


@cache
def linears(recipe: str) -> tuple[type, type]:
    """(column-parallel, row-parallel) classes whose local GEMM runs FP8 with `recipe`."""

    class FP8ColumnParallelLinear(ColumnParallelLinear):
        fp8_recipe = recipe

        def _forward_impl(self, input, weight, *args, **kwargs):
            return local_fp8_linear(self.fp8_recipe, delayed_streams(self), input, weight, *args, **kwargs)

    class FP8RowParallelLinear(RowParallelLinear):
        fp8_recipe = recipe

        def _forward_impl(self, input, weight, *args, **kwargs):
            return local_fp8_linear(self.fp8_recipe, delayed_streams(self), input, weight, *args, **kwargs)

    return FP8ColumnParallelLinear, FP8RowParallelLinear


def delayed_streams(linear) -> DelayedStreams | None:
    """The linear's amax histories under the delayed recipe, made on its first forward (a plain
    attribute, not a buffer: they stay out of state_dict and so out of checkpoints)."""
    if linear.fp8_recipe != "delayed":
        return None
    if "_fp8_streams" not in linear.__dict__:
        linear._fp8_streams = DelayedStreams()
    return linear._fp8_streams


def dense_mlp_submodules(mlp):
    """The MLPSubmodules of a dense MLP in a layer spec (is_dense_mlp), or None for MoE and anything else."""
    if not is_dense_mlp(mlp):
        return None
    return mlp.keywords.get("submodules") if isinstance(mlp, partial) else mlp.submodules


def is_dense_mlp(mlp) -> bool:
    """Whether a layer spec's `mlp` entry builds Megatron's dense MLP: a partial of
    `MLP.as_mlp_submodule` (Megatron 0.19) or a ModuleSpec of MLP (older versions)."""
    from megatron.core.transformer.mlp import MLP
    from megatron.core.transformer.spec_utils import ModuleSpec

    return ((isinstance(mlp, partial) and getattr(mlp.func, "__self__", None) is MLP)
            or (isinstance(mlp, ModuleSpec) and mlp.module is MLP))


def use_in(layer_spec, recipe: str) -> int:
    """Swap the FP8 linears into a local-spec transformer layer (attention and a dense MLP; an
    MoE layer's experts stay bf16). Returns how many linears were swapped. Each call of
    get_gpt_layer_local_spec returns fresh submodule objects, so changing them in place is safe."""
    column, row = linears(recipe)
    swapped = 0
    blocks = [layer_spec.submodules.self_attention.submodules, dense_mlp_submodules(layer_spec.submodules.mlp)]
    for sub in filter(None, blocks):
        for name in FP8_LINEARS:
            current = getattr(sub, name, None)
            if current is ColumnParallelLinear:
                setattr(sub, name, column)
                swapped += 1
            elif current is RowParallelLinear:
                setattr(sub, name, row)
                swapped += 1
    return swapped


def use_in_output_layer(model, recipe: str) -> int:
    """Give a GPTModel's output layer (a plain ColumnParallelLinear that GPTModel makes itself, not
    through the layer spec) the FP8 local GEMM, by switching the built module to the FP8 subclass:
    the same parameters, hooks and state dict, one method replaced. Tied embeddings need nothing
    more: GPTModel passes the embedding's weight in, and the per-step weight cache keys on the
    tensor. Returns 1, or 0 for a chunk that has no output layer (not the last pipeline stage)."""
    layer = getattr(model, "output_layer", None)
    if layer is None:
        return 0
    if type(layer) is not ColumnParallelLinear:
        raise RuntimeError(f"fp8_output_layer: the output layer is a {type(layer).__name__}, not Megatron's "
                           "ColumnParallelLinear; the kit's FP8 GEMM replaces only that class's local GEMM")
    layer.__class__ = linears(recipe)[0]
    return 1
