"""The FP8 linear's GEMMs (helpers/precision/fp8_matmul.py) against a reference built from the
recipes' own quantise/dequantise: forward, input gradient and weight gradient equal the exact
product of the dequantised operands up to the bf16 rounding of the output, for both recipes.
Tensorwise runs torch's real `_scaled_mm` (its CPU kernel takes per-tensor scales); rowwise runs
the same code with `_scaled_mm` replaced by its definition, (a*scale_a) @ (b*scale_b), since the
CPU kernel refuses row scales (the GPU run compares the real one: benchmarks/speed/precision.py)."""
from __future__ import annotations

import pytest
import torch

from helpers.precision import formats, fp8_matmul, recipes

BF16_ULP = 2.0 ** -8  # bf16 output rounding, relative


def emulated_scaled_mm(a, b, scale_a, scale_b, out_dtype):
    return ((a.float() * scale_a) @ (b.float() * scale_b)).to(out_dtype)


def operands(seed=0):
    torch.manual_seed(seed)
    x = torch.randn(2, 24, 64).mul(torch.logspace(-1, 1, 64)).to(torch.bfloat16).requires_grad_()
    w = (torch.randn(48, 64) * 0.05).to(torch.bfloat16).requires_grad_()
    dy = torch.randn(2, 24, 48).to(torch.bfloat16)
    return x, w, dy


def deq(t, recipe, fmt, dim=-1):
    q = recipes.tensorwise(t, fmt) if recipe == "tensorwise" else recipes.rowwise(t, fmt, dim=dim)
    return q.dequantize()


def reference(x, w, dy, recipe):
    """What each GEMM must compute: exact products of the operands as the recipe quantises them."""
    x2, dy2, g = x.detach().reshape(-1, 64), dy.reshape(-1, 48), fp8_matmul.GRAD_FORMAT[recipe]
    y = deq(x2, recipe, "e4m3") @ deq(w.detach(), recipe, "e4m3").t()
    dx = deq(dy2, recipe, g) @ deq(w.detach(), recipe, "e4m3", dim=0)
    dw = deq(dy2, recipe, g, dim=0).t() @ deq(x2, recipe, "e4m3", dim=0)
    return y, dx, dw


def close_to(got, want):
    """Within one bf16 rounding of the exact result (plus fp32 summation-order noise)."""
    err = (got.float() - want).abs()
    return bool((err <= BF16_ULP * want.abs() + 1e-5 * want.abs().max()).all())


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_every_gemm_equals_the_dequantised_product(recipe, monkeypatch):
    if recipe == "rowwise":
        monkeypatch.setattr(fp8_matmul, "scaled_mm", emulated_scaled_mm)
    x, w, dy = operands()
    y = fp8_matmul.fp8_matmul(x, w, recipe)
    y.backward(dy)
    y_ref, dx_ref, dw_ref = reference(x, w, dy, recipe)
    assert y.dtype == x.grad.dtype == w.grad.dtype == torch.bfloat16
    assert y.shape == (2, 24, 48) and x.grad.shape == x.shape and w.grad.shape == w.shape
    assert close_to(y.reshape(-1, 48), y_ref)
    assert close_to(x.grad.reshape(-1, 64), dx_ref)
    assert close_to(w.grad, dw_ref)


def test_fp8_is_really_lower_precision_and_close_enough():
    """The check above could pass with bf16 GEMMs if the reference were bf16 too: FP8's error
    against the bf16 product is at e4m3's level (percent), not bf16's."""
    x, w, _ = operands()
    y = fp8_matmul.fp8_matmul(x, w, "tensorwise").detach().float()
    exact = x.detach().float() @ w.detach().float().t()
    rel = float((y - exact).norm() / exact.norm())
    assert 4e-3 < rel < 6e-2, rel


def test_no_weight_gradient_when_frozen_and_unknown_recipe_refused():
    x, w, dy = operands()
    w.requires_grad_(False)
    fp8_matmul.fp8_matmul(x, w, "tensorwise").backward(dy)
    assert x.grad is not None and w.grad is None
    with pytest.raises(ValueError, match="unknown FP8 recipe"):
        fp8_matmul.fp8_matmul(x, w, "mxfp8")


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_training_step_quantises_each_weight_once_per_step_with_the_same_result(recipe, monkeypatch):
    """The training loop opens training_step() around one step's microbatches: the weight's FP8
    copies are made on the first microbatch and reused, with results identical to quantising every
    time; a second weight gets its own copies; on exit the cache is gone."""
    if recipe == "rowwise":
        monkeypatch.setattr(fp8_matmul, "scaled_mm", emulated_scaled_mm)
    x, w, dy = operands()
    other = (torch.randn(48, 64) * 0.05).to(torch.bfloat16).requires_grad_()

    def step(weights):
        out = []
        for microbatch in range(3):
            xm = (x.detach() * (microbatch + 1)).requires_grad_()
            for weight in weights:
                y = fp8_matmul.fp8_matmul(xm, weight, recipe)
                y.backward(dy)
                out.append(y.detach())
        return out + [xm.grad] + [weight.grad.clone() for weight in weights]

    plain = step([w, other])
    w.grad = other.grad = None
    calls = []
    real = fp8_matmul.quantize
    monkeypatch.setattr(fp8_matmul, "quantize", lambda t, *a, **k: calls.append(t) or real(t, *a, **k))
    with fp8_matmul.training_step():
        cached = step([w, other])
    assert fp8_matmul._fixed_weights is None
    weight_calls = [t for t in calls if t is w or t is other]
    layouts = 1 if recipe == "tensorwise" else 2  # tensorwise: both layouts in one call; rowwise: per row, per column
    assert len(weight_calls) == 2 * layouts, len(weight_calls)  # once per weight, not 3 microbatches x 2
    assert all(torch.equal(a, b) for a, b in zip(plain, cached))


def test_delayed_first_step_is_current_scaling_then_the_history_sets_the_scale():
    """Step 1 has no history: the delayed recipe quantises as tensorwise does (same bytes, so the
    same results) and records each stream's amax. Step 2 scales by max / (step 1's amax): a
    smaller input is quantised with the old, larger amax's scale, no longer its own."""
    x, w, dy = operands()
    streams = fp8_matmul.DelayedStreams()

    def run(recipe, xin, streams=None):
        xin = xin.detach().requires_grad_()
        wt = w.detach().requires_grad_()
        y = fp8_matmul.fp8_matmul(xin, wt, recipe, streams)
        y.backward(dy)
        return y.detach(), xin.grad, wt.grad

    with fp8_matmul.training_step():
        first = run("delayed", x, streams)
    assert all(torch.equal(a, b) for a, b in zip(first, run("tensorwise", x)))
    amax = x.detach().float().abs().max()
    assert streams.input.ready and streams.grad_output.ready
    assert streams.input.history[0] == amax and float(streams.input.history[1:].abs().sum()) == 0
    assert torch.equal(streams.input.scale, 448.0 / amax)  # torch's number / tensor, as the quantiser's
    assert streams.grad_output.history[0] == dy.float().abs().max()

    small = x.detach() * 0.3
    with fp8_matmul.training_step():
        y, _, _ = run("delayed", small, streams)
    scale = 448.0 / amax
    want = (small.float() * scale).clamp(-448, 448).to(torch.float8_e4m3fn).float() / scale
    y_ref = want.reshape(-1, 64) @ deq(w.detach(), "tensorwise", "e4m3").t()
    assert close_to(y.reshape(-1, 48), y_ref)
    assert not torch.equal(y, run("tensorwise", small)[0])  # its own amax would have given other bytes
    assert streams.input.history[0] == small.float().abs().max() and streams.input.history[1] == amax


def test_a_delayed_stream_saturates_when_the_tensor_outgrows_its_history_then_forgets():
    stream = fp8_matmul.DelayedStream("e4m3")
    a = torch.randn(32, 16).to(torch.bfloat16)
    amax = a.float().abs().max()
    with fp8_matmul.training_step():
        stream.quantize(a)
    with fp8_matmul.training_step():
        q, _, inverse = stream.quantize(a * 4)  # 4x the history's amax: its top quarter clips at 448
        inverse = inverse.clone()  # the stream's own tensor, which the step's end updates in place
    assert float(q.float().abs().max()) == 448.0 and int((q.float().abs() == 448).sum()) > 1
    assert torch.equal(inverse, 1.0 / (448.0 / amax))
    assert stream.history[0] == 4 * amax and torch.equal(stream.scale, 448.0 / (4 * amax))
    for _ in range(fp8_matmul.HISTORY):  # small steps push the large amax out of the window
        with fp8_matmul.training_step():
            stream.quantize(a)
    assert torch.equal(stream.scale, 448.0 / amax)


def test_a_failed_step_and_evaluation_leave_the_histories_alone_and_delayed_needs_streams():
    stream = fp8_matmul.DelayedStream("e4m3")
    with pytest.raises(RuntimeError, match="boom"), fp8_matmul.training_step():
        stream.quantize(torch.ones(16, 16, dtype=torch.bfloat16))
        raise RuntimeError("boom")
    assert not stream.ready and fp8_matmul._fixed_weights is None and not fp8_matmul._streams_used
    assert int(stream.amax_bits) == 0  # the failed step's amax is forgotten, not folded into the next
    with fp8_matmul.training_step():
        stream.quantize(torch.ones(16, 16, dtype=torch.bfloat16))
    history, scale = stream.history.clone(), stream.scale.clone()
    q, _, _ = stream.quantize(torch.full((16, 16), 8.0, dtype=torch.bfloat16))  # evaluation, between steps
    assert float(q.float().max()) == 448.0  # quantised with the step's scale (amax 1: saturates)
    assert int(stream.amax_bits) == 0 and not fp8_matmul._streams_used  # ...and not recorded
    with fp8_matmul.training_step():
        stream.quantize(torch.ones(16, 16, dtype=torch.bfloat16))
    assert torch.equal(stream.history[1:], history[:-1]) and torch.equal(stream.scale, scale)
    x, w, _ = operands()
    with pytest.raises(ValueError, match="needs the linear's DelayedStreams"):
        fp8_matmul.fp8_matmul(x, w, "delayed")


def test_streams_advance_together_each_by_its_own_history_and_format():
    """training_step() advances every stream that quantised in the step, and only those: each gets
    max / (its own largest amax), with its format's max, and a fresh amax counter of its own."""
    streams = [fp8_matmul.DelayedStream(fmt) for fmt in ("e4m3", "e5m2", "e4m3")]
    tensors = [torch.randn(16, 32).to(torch.bfloat16) * k for k in (1.0, 3.0, 0.25)]
    with fp8_matmul.training_step():
        for s, t in zip(streams, tensors):
            s.quantize(t)
    with fp8_matmul.training_step():
        for s, t in zip(streams, tensors):
            s.quantize(t * 0.5)  # smaller: the first step's amax still sets the scale
    for s, t in zip(streams, tensors):
        amax = t.float().abs().max()
        assert torch.equal(s.history[:2], torch.stack([amax * 0.5, amax])) and float(s.history[2:].sum()) == 0
        assert torch.equal(s.scale, formats.get(s.fmt).max / amax) and torch.equal(s.inverse, 1.0 / s.scale)
        assert int(s.amax_bits) == 0
    # computed stacked, kept apart: cuBLASLt takes no scale that is a view into a larger tensor
    scales = [t for s in streams for t in (s.scale, s.inverse)]
    assert all(t._base is None and t.dim() == 0 for t in scales)
    assert len({t.untyped_storage().data_ptr() for t in scales}) == len(scales)
    with fp8_matmul.training_step():
        streams[0].quantize(tensors[0] * 8)  # only this stream quantises (and so advances)
    assert streams[0].history[0] == tensors[0].float().abs().max() * 8
    assert streams[2].history[0] == tensors[2].float().abs().max() * 0.5  # untouched



@pytest.mark.parametrize("recipe", ["tensorwise", "delayed", "rowwise"])
def test_accumulate_puts_each_microbatchs_weight_gradient_into_main_grad(recipe, monkeypatch):
    """Megatron's gradient_accumulation_fusion contract (tensor_parallel/layers.py): with
    `accumulate`, each microbatch's weight gradient is added into the parameter's fp32 `main_grad`, a
    parameter of Megatron's DDP (it carries `grad_added_to_main_grad`) is flagged and handed a
    placeholder gradient, and the sum equals the unfused gradients' sum up to their bf16 rounding
    (per-tensor recipes: the fused sum is the fp32 product itself, the CPU stand-in for cuBLASLt's
    beta = 1; rowwise adds its bf16 product, so the sums are equal). The input gradient does not change."""
    if recipe == "rowwise":
        monkeypatch.setattr(fp8_matmul, "scaled_mm", emulated_scaled_mm)
    x, w, dy = operands()

    def two_microbatches(accumulate):
        weight = w.detach().clone().requires_grad_()
        weight.main_grad = torch.zeros(weight.shape, dtype=torch.float32)
        weight.grad_added_to_main_grad = False
        streams = fp8_matmul.DelayedStreams() if recipe == "delayed" else None
        grads, input_grads = [], []
        with fp8_matmul.training_step():
            for scale in (1.0, -0.5):
                xm = (x.detach() * scale).requires_grad_()
                fp8_matmul.fp8_matmul(xm, weight, recipe, streams, accumulate=accumulate).backward(dy)
                grads.append(weight.grad)
                input_grads.append(xm.grad)
                weight.grad = None
        return weight, grads, input_grads

    fused, placeholders, fused_dx = two_microbatches(True)
    plain, plain_grads, plain_dx = two_microbatches(False)
    assert fused.grad_added_to_main_grad and not plain.grad_added_to_main_grad
    assert all(g.shape == w.shape and g.dtype == torch.bfloat16 for g in placeholders)
    assert float(plain.main_grad.abs().sum()) == 0  # unfused: the gradient is returned, main_grad untouched
    assert all(torch.equal(a, b) for a, b in zip(fused_dx, plain_dx))
    want = plain_grads[0].float() + plain_grads[1].float()
    if recipe == "rowwise":
        assert torch.equal(fused.main_grad, want)
        return
    err = (fused.main_grad - want).abs()
    assert float(err.max()) > 0  # fp32 sum against two bf16-rounded terms: not the same numbers...
    assert bool((err <= 2 * BF16_ULP * (plain_grads[0].float().abs() + plain_grads[1].float().abs())
                 + 1e-6).all())  # ...but one bf16 rounding of each term apart


def test_accumulate_without_ddps_flag_returns_no_gradient():
    """A weight with main_grad but outside Megatron's DDP (no `grad_added_to_main_grad`): Megatron's
    linear returns None, and so does the FP8 GEMM."""
    x, w, dy = operands()
    w.main_grad = torch.zeros(w.shape, dtype=torch.float32)
    fp8_matmul.fp8_matmul(x, w, "tensorwise", accumulate=True).backward(dy)
    assert w.grad is None and float(w.main_grad.abs().max()) > 0
