"""One linear layer's three GEMMs in FP8 on `torch._scaled_mm`: y = x W^T (forward), dx = dy W
(input gradient, "dgrad") and dW = dy^T x (weight gradient, "wgrad"). Inputs and outputs stay
bf16; each GEMM quantises its two operands right before it (current scaling, recipes.scale_and_cast,
or delayed scaling for activations and gradients) and accumulates in fp32 inside the tensor cores; the bf16
master weights and the fp32 gradient buffers of Megatron's optimizer are untouched.

  recipe      forward            dgrad              wgrad              saved for backward
  tensorwise  x e4m3, W e4m3     dy e5m2, W e4m3    dy e5m2, x e4m3    x^T and W^T in FP8 (+ scales)
  delayed     as tensorwise; x's and dy's scales from their amax histories (DelayedStream), W's current
  rowwise     x e4m3, W e4m3     dy e4m3, W e4m3    dy e4m3, x e4m3    x and W in bf16
              (one scale per row of each operand along the GEMM's contraction dimension, so
              each GEMM quantises its own copy: W per output row forward, per input column for
              dgrad; x and dy per token forward/dgrad, per feature for wgrad)

Tensorwise follows Transformer Engine's "hybrid" format (gradients in e5m2, their wider range),
rowwise torchao's rowwise recipe (e4m3 throughout: a scale per row already covers the range).
`_scaled_mm` wants its first operand row-major and its second column-major, so the quantiser
writes an operand transposed where a GEMM needs that. Its dimensions must be multiples of 16
(checked before a job starts: helpers/job/rules/precision.py). On the GPU the quantiser is one
Triton kernel per tensor after one amax reduction (helpers/precision/fp8_cast_gpu.py says why: as
torch operations it cost more memory traffic than FP8 saves), and inside training_step() (one
training step's microbatches) each weight is quantised once, not once per microbatch."""
from __future__ import annotations

from contextlib import contextmanager

import torch

from helpers.job.spec import FP8_RECIPES, PER_TENSOR_FP8_RECIPES
from helpers.precision import formats, recipes

RECIPES = FP8_RECIPES  # the names JobSpec.fp8_recipe takes
GRAD_FORMAT = {"tensorwise": "e5m2", "delayed": "e5m2", "rowwise": "e4m3"}
scaled_mm = torch._scaled_mm  # module attribute: the unit test swaps in an emulation for rowwise on CPU


def scaled_cast_layouts(x, fmax: float, dtype, dim, plain: bool, transposed: bool):
    """recipes.scale_and_cast_to, returning the FP8 matrix row-major (`plain`), its transpose
    made contiguous (`transposed`: what a GEMM needs as a column-major operand), or both, and the
    dequantisation scale (the CPU path; fp8_cast_gpu.scale_cast computes the same bytes on the GPU)."""
    q, inverse = recipes.scale_and_cast_to(x, fmax, dtype, dim)
    return (q if plain else None), (q.t().contiguous() if transposed else None), inverse


def quantize(x: torch.Tensor, fmt: str, dim: int | None = None, plain: bool = True, transposed: bool = False):
    """(row-major FP8 or None, transposed FP8 or None, fp32 dequantisation scale). On the GPU one
    amax reduction and one Triton kernel (helpers/precision/fp8_cast_gpu.py, imported only there:
    triton is not installed everywhere torch is); elsewhere the torch operations above."""
    f = formats.get(fmt)
    if x.device.type != "cuda":
        return scaled_cast_layouts(x, f.max, f.dtype, dim, plain, transposed)
    from helpers.precision import fp8_cast_gpu
    with torch.no_grad():  # the quantised copies need no autograd: FP8Matmul is the Function
        return fp8_cast_gpu.scale_cast(x.detach(), f.max, f.dtype, dim, plain, transposed)


_fixed_weights: dict | None = None  # id(weight) -> (weight, its FP8 layouts) inside training_step()
_streams_used: set = set()  # DelayedStreams that quantised since the last step ended


@contextmanager
def training_step():
    """One training step's forward and backward passes (the training loop opens it around Megatron's
    schedule). Inside, no weight changes (the optimizer steps after), so each weight is quantised
    once and its FP8 copies (1 byte per weight per layout) are reused by every microbatch, then
    dropped. At the end, every delayed-scaling stream that quantised advances its amax history."""
    global _fixed_weights
    _fixed_weights = {}
    try:
        yield
    except BaseException:
        for stream in _streams_used:  # a failed step's amaxes may be garbage: forgotten
            stream.amax_bits.zero_()
        raise
    else:
        advance(_streams_used)
    finally:
        _fixed_weights = None
        _streams_used.clear()


def quantize_weight(weight: torch.Tensor, fmt: str, dim: int | None = None, plain: bool = True,
                    transposed: bool = False):
    """quantize() of a weight, from the cache inside training_step()."""
    if _fixed_weights is None:
        return quantize(weight, fmt, dim, plain, transposed)
    key = (id(weight), fmt, dim, plain, transposed)
    hit = _fixed_weights.get(key)
    if hit is None or hit[0] is not weight:  # `is`: an id can be reused by another tensor
        hit = _fixed_weights[key] = (weight, quantize(weight, fmt, dim, plain, transposed))
    return hit[1]


HISTORY = 16  # steps of amax a delayed scale looks back on (recipes.DelayedScaling's default)


class DelayedStream:
    """Delayed scaling of one tensor stream (one linear's inputs, or its output gradients), on its
    device: the scale for a step is max / (largest amax of the last HISTORY steps), so the cast
    needs no amax pass before it; the cast measures this step's amax on the way (over every
    microbatch), and it joins the history when the step ends (training_step, advance). A step whose tensor
    outgrows the history saturates at the format's max. The first step has no history and scales
    each tensor by its own amax (current scaling; Transformer Engine starts from scale 1 instead,
    which would flush most of a first step's gradients to zero). The state is not checkpointed:
    a resumed run starts its histories again. The scale and its inverse change in place only when
    a step ends (advance), after the step's backward passes have used the forward's."""

    def __init__(self, fmt: str):
        self.fmt = fmt
        self.history = None  # fp32 [HISTORY]: the last steps' amaxes, newest first (0: none yet)
        self.amax_bits = None  # int32 scalar: this step's amax so far, as float32 bits (the kernel's atomic max)
        self.scale = self.inverse = None  # fp32 scalars: multiply to quantise, multiply to dequantise
        self.ready = False  # a scale from the history exists (after the first step)

    def quantize(self, x: torch.Tensor, plain: bool = True, transposed: bool = False, prologue: str | None = None,
                 h: torch.Tensor | None = None):
        """(row-major FP8 or None, transposed FP8 or None, dequantisation multiplier) of a matrix.
        The multiplier is the stream's own tensor, valid until the step ends (advance updates it
        in place). Only a training step's amaxes are recorded (inside training_step(); an evaluation pass
        between steps quantises with the current scale and leaves the history alone). `prologue`
        ("gelu", or "gelu_backward" of the gradient x at the GeLU's input h): the matrix quantised is
        that op's bf16 output, computed inside the cast kernel on the GPU once a scale exists."""
        f = formats.get(self.fmt)
        if self.history is None:
            self.history = torch.zeros(HISTORY, dtype=torch.float32, device=x.device)
            self.amax_bits = torch.zeros((), dtype=torch.int32, device=x.device)
        training = _fixed_weights is not None
        if training:
            _streams_used.add(self)
        bits = self.amax_bits if training else torch.zeros_like(self.amax_bits)  # a scratch one: not recorded
        x, h = x.detach(), None if h is None else h.detach()
        with torch.no_grad():
            amax = bits.view(torch.float32)
            if self.ready and x.device.type == "cuda":
                from helpers.precision import fp8_cast_gpu
                q, qt = fp8_cast_gpu.delayed_cast(x, f.max, f.dtype, self.scale, bits, plain, transposed,
                                                  prologue, h)
                return q, qt, self.inverse
            x = apply_prologue(x, prologue, h)
            if not self.ready:  # first step: current scaling, and its amax recorded
                torch.maximum(amax, torch.linalg.vector_norm(x, float("inf")).float(), out=amax)
                return quantize(x, self.fmt, None, plain, transposed)
            x32 = x.to(torch.float32)  # the kernel's arithmetic in torch (CPU tests)
            torch.maximum(amax, x32.abs().amax(), out=amax)
            q = (x32 * self.scale).clamp(-f.max, f.max).to(f.dtype)
            return (q if plain else None), (q.t().contiguous() if transposed else None), self.inverse


def apply_prologue(x: torch.Tensor, prologue: str | None, h: torch.Tensor | None) -> torch.Tensor:
    """The op a fused cast computes before quantising (fp8_cast_gpu.delayed_cast's `prologue`), in torch."""
    if prologue is None:
        return x
    if prologue == "gelu":
        return torch.nn.functional.gelu(x)
    if prologue == "gelu_backward":
        return torch.ops.aten.gelu_backward(x, h)
    raise ValueError(f"unknown prologue {prologue!r}")


def advance(streams) -> None:
    """End of a step, for every stream that quantised in it: each one's amax joins its history and
    its next scale comes from the history. Computed for all streams of a format at once (stacked),
    then copied back into each stream's own tensors with multi-tensor copies: ~15 launches per step
    instead of ~7 per stream (1,344 for the 1.4B GPT's 192 streams). Those many tiny launches came
    when the launch queue was full of the backward's kernels, so the host sat blocked in them until
    the GPU had nearly finished (the step's fwd_bwd_drain_s read ~0, as if host-bound); stacked, the
    step is as fast (H200, 2026-12-02: 0.851 against 0.852 s, losses bit for bit equal;
    docs/results/gpu_profile.md). Each stream keeps tensors of its own:
    cuBLASLt refuses a dequantisation scale that is a row of a larger tensor
    (CUBLAS_STATUS_NOT_SUPPORTED from `_scaled_mm`, H200, 2026-12-01). They are updated in place,
    after every backward pass of the step has run."""
    groups: dict = {}
    for s in streams:
        groups.setdefault(s.fmt, []).append(s)
    with torch.no_grad():
        for fmt, group in groups.items():
            amax = torch.stack([s.amax_bits for s in group]).view(torch.float32)  # [n]
            history = torch.cat([amax[:, None], torch.stack([s.history for s in group])[:, :-1]], dim=1)
            top = history.amax(dim=1)
            scale = torch.where(top > 0, formats.get(fmt).max / top, torch.ones_like(top))
            inverse = 1.0 / scale
            for s in group:
                if s.scale is None:  # the first step's end: the stream's scale tensors are made
                    s.scale, s.inverse = torch.empty_like(top[0]), torch.empty_like(top[0])
                s.ready = True
            torch._foreach_copy_([s.history for s in group], list(history.unbind(0)))
            torch._foreach_copy_([s.scale for s in group], list(scale.unbind(0)))
            torch._foreach_copy_([s.inverse for s in group], list(inverse.unbind(0)))
            torch._foreach_zero_([s.amax_bits for s in group])


class DelayedStreams:
    """The two streams of one FP8 linear under the delayed recipe (its weight is quantised with
    current scaling, once per step: training_step)."""

    def __init__(self):
        self.input = DelayedStream("e4m3")
        self.grad_output = DelayedStream(GRAD_FORMAT["delayed"])


def scaled_matmul(a, b, scale_a, scale_b, out_dtype=torch.bfloat16) -> torch.Tensor:
    """a @ b of two FP8 operands with their dequantisation scales (b column-major), bf16 out by default."""
    return scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype)


def _accumulate_wgrad(dyq_t, xq_t, dys, xs, main_grad) -> None:
    """main_grad (fp32) += the per-tensor-scaled wgrad: on the GPU in the GEMM itself (cuBLASLt with
    beta = 1, helpers/precision/cublaslt_accumulate.py); elsewhere `_scaled_mm`'s fp32 product added."""
    if main_grad.is_cuda:
        from helpers.precision import cublaslt_accumulate
        cublaslt_accumulate.wgrad_accumulate(dyq_t, xq_t, dys, xs, main_grad)
    else:
        main_grad.add_(scaled_matmul(dyq_t, xq_t.t(), dys, xs, out_dtype=torch.float32))


def _placeholder_after_main_grad(weight, dtype):
    """What the backward returns for a weight whose gradient is already in its main_grad: Megatron's
    linear's contract (tensor_parallel/layers.py) under gradient_accumulation_fusion. Megatron's DDP
    marks its parameters with `grad_added_to_main_grad`; for them a placeholder gradient keeps DDP's
    hook on the backward's own thread, and the flag tells the hook not to add it; others get None."""
    if not hasattr(weight, "grad_added_to_main_grad"):
        return None
    weight.grad_added_to_main_grad = True
    make = torch.zeros if getattr(weight, "zero_out_wgrad", False) else torch.empty
    return make(weight.main_grad.shape, dtype=dtype, device=weight.main_grad.device)


def weight_gradient(dyq_t, xq_t, dys, xs, accumulate_into, dtype):
    """dW = dy^T x of per-tensor-scaled FP8 operands: added into `accumulate_into.main_grad` (then the
    placeholder Megatron's DDP expects is returned), or returned in bf16 when `accumulate_into` is None."""
    if accumulate_into is None:
        return scaled_matmul(dyq_t, xq_t.t(), dys, xs)
    _accumulate_wgrad(dyq_t, xq_t, dys, xs, accumulate_into.main_grad)
    return _placeholder_after_main_grad(accumulate_into, dtype)


class FP8Matmul(torch.autograd.Function):
    """x [..., K] (bf16) @ weight [N, K]^T -> [..., N] (bf16), every GEMM in FP8. `_scaled_mm`
    takes its second operand column-major: W^T for the forward is W's row-major storage seen
    transposed; dgrad's W and wgrad's x are quantised straight into transposed storage.
    `accumulate`: the weight gradient is added into `weight.main_grad` (fp32) instead of returned
    (Megatron's gradient_accumulation_fusion; per-tensor recipes in the GEMM itself)."""

    @staticmethod
    def forward(ctx, x, weight, recipe, streams=None, accumulate=False):
        if recipe not in RECIPES:
            raise ValueError(f"unknown FP8 recipe {recipe!r}; known: {', '.join(RECIPES)}")
        if recipe == "delayed" and streams is None:
            raise ValueError("the delayed FP8 recipe needs the linear's DelayedStreams (its amax histories)")
        ctx.recipe, ctx.x_shape, ctx.streams = recipe, x.shape, streams
        ctx.accumulate_into = weight if accumulate else None  # the parameter itself: its main_grad
        x2 = x.reshape(-1, x.shape[-1]).contiguous()  # [M, K]
        if recipe in PER_TENSOR_FP8_RECIPES:
            xq, xq_t, xs = (streams.input.quantize(x2, transposed=True) if recipe == "delayed"
                            else quantize(x2, "e4m3", transposed=True))
            wq, wq_t, ws = quantize_weight(weight, "e4m3", transposed=True)  # both layouts of W in one pass
            y = scaled_matmul(xq, wq.t(), xs, ws)
            # FP8 x (transposed for wgrad): half of bf16's bytes; W^T in FP8 for dgrad
            ctx.save_for_backward(xq_t, xs, wq_t, ws)
        else:
            xq, _, xs = quantize(x2, "e4m3", dim=-1)  # [M, 1]: per token
            wq, _, ws = quantize_weight(weight, "e4m3", dim=-1)  # [N, 1]: per output row
            y = scaled_matmul(xq, wq.t(), xs, ws.t().contiguous())
            ctx.save_for_backward(x2, weight)
        return y.reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):
        recipe = ctx.recipe
        gfmt = GRAD_FORMAT[recipe]
        dy2 = dy.reshape(-1, dy.shape[-1]).contiguous()  # [M, N]
        want_dx, want_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx = dw = None
        if recipe in PER_TENSOR_FP8_RECIPES:
            xq_t, xs, wq_t, ws = ctx.saved_tensors
            dyq, dyq_t, dys = (ctx.streams.grad_output.quantize(dy2, plain=want_dx, transposed=want_dw)
                               if recipe == "delayed" else quantize(dy2, gfmt, plain=want_dx, transposed=want_dw))
            if want_dx:
                dx = scaled_matmul(dyq, wq_t.t(), dys, ws)
            if want_dw:
                dw = weight_gradient(dyq_t, xq_t, dys, xs, ctx.accumulate_into, dy.dtype)
        else:
            x2, weight = ctx.saved_tensors
            if want_dx:
                dyq, _, dys = quantize(dy2, gfmt, dim=-1)  # [M, 1]: per token, over N
                _, wq_t, ws = quantize_weight(weight, "e4m3", dim=0, plain=False, transposed=True)  # [1, K]: per column
                dx = scaled_matmul(dyq, wq_t.t(), dys, ws)
            if want_dw:
                _, dyq_t, dys = quantize(dy2, gfmt, dim=0, plain=False, transposed=True)  # [1, N]: per feature
                _, xq_t, xs = quantize(x2, "e4m3", dim=0, plain=False, transposed=True)  # [1, K]: per feature
                dw = scaled_matmul(dyq_t, xq_t.t(), dys.t().contiguous(), xs)
                if ctx.accumulate_into is not None:  # row scales: cuBLASLt's accumulate is per-tensor here
                    ctx.accumulate_into.main_grad.add_(dw)
                    dw = _placeholder_after_main_grad(ctx.accumulate_into, dy.dtype)
        if dx is not None:
            dx = dx.reshape(ctx.x_shape)
        return dx, dw, None, None, None


def fp8_matmul(x: torch.Tensor, weight: torch.Tensor, recipe: str = "tensorwise",
               streams: DelayedStreams | None = None, accumulate: bool = False) -> torch.Tensor:
    return FP8Matmul.apply(x, weight, recipe, streams, accumulate)
