"""Replaces: Megatron-Core's native fused vocab-parallel cross-entropy (megatron/core/fusions/
fused_cross_entropy.py, torch.compile'd) on GPU jobs, with two Triton kernels that do what Transformer
Engine's `parallel_cross_entropy` does (Megatron's `cross_entropy_fusion_impl="te"`): the softmax is
never kept; the backward recomputes it from the bf16 logits.

Why it pays: the native path turns the [tokens, vocabulary] logits into fp32, subtracts the max,
exponentiates and normalises in place, keeps that fp32 softmax for the backward and builds the
gradient from it: about 30 GB of memory traffic per microbatch of the 1.4B GPT (16,384 tokens x
50,304) in five compiled kernels, 13.5 ms on one H100 (docs/results/precision.md), and the fp32 copy
(3.3 GB) stays alive until the backward. Here the forward reads the bf16 logits once (one program per
token: a running max and a running sum of exponentials, per lane, then the target's logit) and the
backward reads them once more and writes the bf16 gradient, (exp(x - logsumexp) - onehot) x dloss:
three passes over the bf16 logits' bytes in all (1.8 ms there).

Tensor parallel: each rank holds a slice of the vocabulary. The forward kernel returns each token's
local max, local sum of exp(x - local max) and its target's logit where the target falls in this
rank's slice (0 elsewhere); two all-reduces over [tokens]-sized vectors combine them, as Megatron's
VocabParallelCrossEntropy does. Arithmetic in fp32 throughout; the loss equals the native path's
to fp32 rounding and each gradient element to one bf16 rounding (tests/unit/test_cross_entropy_triton.py,
in Triton's interpreter on CPU; benchmarks/speed/cross_entropy.py on the GPU)."""
from __future__ import annotations

import torch
import torch.distributed as dist
import triton
import triton.language as tl
from megatron.core.tensor_parallel.utils import VocabUtility

# Vocabulary entries per loop step and warps per program (one program per token): 8 bf16 values
# (16 bytes) per thread per load at 8 warps. The slice's vocabulary size is a compile-time constant
# (one compilation per job; Triton's CPU interpreter cannot loop to a run-time bound under numpy 2).
BLOCK, WARPS = 2048, 8


@triton.jit
def _forward_kernel(x_ptr, labels_ptr, max_ptr, sum_ptr, target_ptr, vocab_start, V: tl.constexpr,
                    BLOCK: tl.constexpr):
    """Per token: max over its logits, sum of exp(logit - max), and its target's logit (0 when the
    target lies outside this rank's slice [vocab_start, vocab_start + V))."""
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * V
    cols = tl.arange(0, BLOCK)
    running_max = tl.full([BLOCK], float("-inf"), tl.float32)
    running_sum = tl.zeros([BLOCK], tl.float32)
    for start in range(0, V, BLOCK):
        x = tl.load(base + start + cols, mask=start + cols < V, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(running_max, x)
        # a lane that has seen only padding keeps max -inf and sum 0 (exp(-inf - -inf) would be NaN)
        seen = new_max > float("-inf")
        running_sum = tl.where(seen, running_sum * tl.exp(running_max - new_max) + tl.exp(x - new_max), 0.0)
        running_max = new_max
    row_max = tl.max(running_max, axis=0)
    row_sum = tl.sum(tl.where(running_max > float("-inf"), running_sum * tl.exp(running_max - row_max), 0.0), axis=0)
    local = tl.load(labels_ptr + row) - vocab_start
    mine = (local >= 0) & (local < V)
    target = tl.load(base + local, mask=mine, other=0.0).to(tl.float32)
    tl.store(max_ptr + row, row_max)
    tl.store(sum_ptr + row, row_sum)
    tl.store(target_ptr + row, tl.where(mine, target, 0.0))


@triton.jit
def _backward_kernel(x_ptr, labels_ptr, lse_ptr, dloss_ptr, dx_ptr, vocab_start, V: tl.constexpr,
                     BLOCK: tl.constexpr):
    """dx = (softmax(x) - onehot(target)) * dloss per token, softmax as exp(x - logsumexp)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    lse = tl.load(lse_ptr + row)
    dloss = tl.load(dloss_ptr + row)
    local = tl.load(labels_ptr + row) - vocab_start
    for start in range(0, V, BLOCK):
        c = start + cols
        inside = c < V
        x = tl.load(x_ptr + row * V + c, mask=inside, other=0.0).to(tl.float32)
        p = tl.exp(x - lse)
        p = tl.where(c == local, p - 1.0, p)
        tl.store(dx_ptr + row * V + c, (p * dloss).to(dx_ptr.dtype.element_ty), mask=inside)


def _split(tp_group) -> bool:
    """The vocabulary is split over more than one tensor-parallel rank."""
    return tp_group is not None and dist.get_world_size(tp_group) > 1


def _vocab_start(tp_group, v_local: int) -> int:
    """Where this rank's vocabulary slice starts (Megatron's own rule)."""
    if not _split(tp_group):
        return 0
    return VocabUtility.vocab_range_from_per_partition_vocab_size(
        v_local, dist.get_rank(tp_group), dist.get_world_size(tp_group))[0]


def logsumexp_and_target(logits2: torch.Tensor, labels1: torch.Tensor, tp_group) -> tuple[torch.Tensor, torch.Tensor]:
    """(logsumexp over the whole vocabulary, the target's logit) per token, fp32 [tokens]."""
    n, v = logits2.shape
    row_max, row_sum, target = (torch.empty(n, dtype=torch.float32, device=logits2.device) for _ in range(3))
    _forward_kernel[(n,)](logits2, labels1, row_max, row_sum, target, _vocab_start(tp_group, v), V=v,
                          BLOCK=BLOCK, num_warps=WARPS)
    if _split(tp_group):
        global_max = row_max.clone()
        dist.all_reduce(global_max, op=dist.ReduceOp.MAX, group=tp_group)
        # the sums rescaled to the global max, and the target's logit (one rank's, zeros elsewhere): one all-reduce
        sums = torch.stack([row_sum * torch.exp(row_max - global_max), target])
        dist.all_reduce(sums, group=tp_group)
        (row_sum, target), row_max = sums, global_max
    return row_max + torch.log(row_sum), target


class VocabParallelCrossEntropy(torch.autograd.Function):
    """loss [s, b] (fp32) of logits [s, b, V/tp] (bf16) and labels [s, b]; keeps the bf16 logits
    and one fp32 logsumexp per token for the backward."""

    @staticmethod
    def forward(ctx, logits, labels, tp_group):
        logits2 = logits.reshape(-1, logits.shape[-1]).contiguous()
        labels1 = labels.reshape(-1).contiguous()
        lse, target = logsumexp_and_target(logits2, labels1, tp_group)
        ctx.tp_group = tp_group
        ctx.logits_shape = logits.shape
        ctx.save_for_backward(logits2, labels1, lse)
        return (lse - target).view(labels.shape)

    @staticmethod
    def backward(ctx, dloss):
        logits2, labels1, lse = ctx.saved_tensors
        n, v = logits2.shape
        dx = torch.empty_like(logits2)
        _backward_kernel[(n,)](logits2, labels1, lse, dloss.reshape(-1).contiguous().float(), dx,
                               _vocab_start(ctx.tp_group, v), V=v, BLOCK=BLOCK, num_warps=WARPS)
        return dx.view(ctx.logits_shape), None, None


_native = None  # Megatron's own function, for what the kernels do not take


def vocab_parallel_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, tp_group=None) -> torch.Tensor:
    """The signature of Megatron's fused_vocab_parallel_cross_entropy; CUDA bf16/fp16 logits go to
    the kernels, anything else to Megatron's own."""
    if logits.is_cuda and logits.dtype in (torch.bfloat16, torch.float16):
        return VocabParallelCrossEntropy.apply(logits, labels, tp_group)
    return _native(logits, labels, tp_group)


def install() -> None:
    """Megatron's language models call this module's cross-entropy where their config asks for the
    native fused one (`cross_entropy_loss_fusion` with `cross_entropy_fusion_impl="native"`). Runs in
    the rank process (helpers/runtime/build.py), before the model computes a loss."""
    global _native
    from megatron.core.models.common.language_module import language_module

    if language_module.fused_vocab_parallel_cross_entropy is not vocab_parallel_cross_entropy:
        _native = language_module.fused_vocab_parallel_cross_entropy
        language_module.fused_vocab_parallel_cross_entropy = vocab_parallel_cross_entropy
