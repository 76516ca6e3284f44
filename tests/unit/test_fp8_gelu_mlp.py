"""The fused FP8 GeLU MLP (helpers/precision/fp8_gelu_mlp.py) against the unfused path it replaces:
two FP8 linears (fp8_matmul) around torch's GeLU, under the delayed recipe, over three training steps
of two microbatches (the first step current-scaled, the later ones from the amax histories). On CPU
the fused casts run the prologue in torch, so output, input gradient, both weight gradients (returned,
and accumulated into main_grad) and every stream's amax history must be bit for bit equal. The GPU
kernel's prologue is compared in Triton's interpreter here, and byte for byte on the GPU by
benchmarks/speed/fp8_gelu_mlp.py."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from helpers.precision import fp8_matmul
from helpers.precision.fp8_gelu_mlp import fp8_gelu_mlp


def weights(seed=0):
    torch.manual_seed(seed)
    return (torch.randn(96, 32) * 0.2).to(torch.bfloat16), (torch.randn(32, 96) * 0.1).to(torch.bfloat16)


def unfused(x, w1, w2, s1, s2, accumulate):
    h = fp8_matmul.fp8_matmul(x, w1, "delayed", s1, accumulate=accumulate)
    return fp8_matmul.fp8_matmul(F.gelu(h), w2, "delayed", s2, accumulate=accumulate)


def fused(x, w1, w2, s1, s2, accumulate):
    return fp8_gelu_mlp(x, w1, w2, s1, s2, accumulate=accumulate)


def train(mlp, accumulate: bool, steps=3):
    w1, w2 = (w.clone().requires_grad_() for w in weights())
    for w in (w1, w2):
        w.main_grad = torch.zeros(w.shape, dtype=torch.float32)
        w.grad_added_to_main_grad = False
    s1, s2 = fp8_matmul.DelayedStreams(), fp8_matmul.DelayedStreams()
    g = torch.Generator().manual_seed(1)
    seen = []
    for step in range(steps):
        with fp8_matmul.training_step():
            for _ in range(2):
                x = (torch.randn(2, 8, 32, generator=g) * (1 + step)).to(torch.bfloat16).requires_grad_()
                dy = torch.randn(2, 8, 32, generator=g).to(torch.bfloat16)
                y = mlp(x, w1, w2, s1, s2, accumulate)
                y.backward(dy)
                seen += [y.detach(), x.grad]
                if not accumulate:
                    seen += [w1.grad, w2.grad]
                w1.grad = w2.grad = None
    histories = [s.history.clone() for s in (s1.input, s1.grad_output, s2.input, s2.grad_output)]
    return seen, histories, (w1.main_grad, w2.main_grad)


@pytest.mark.parametrize("accumulate", [False, True])
def test_fused_equals_two_fp8_linears_around_torchs_gelu(accumulate):
    want, want_hist, want_main = train(unfused, accumulate)
    got, got_hist, got_main = train(fused, accumulate)
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))
    assert all(torch.equal(a, b) for a, b in zip(got_hist, want_hist))
    assert all(float(h[0]) > 0 for h in got_hist)  # every stream measured its tensor in the last step
    assert all(torch.equal(a, b) for a, b in zip(got_main, want_main))
    if accumulate:
        assert float(got_main[0].abs().sum()) > 0 and float(got_main[1].abs().sum()) > 0


def test_a_different_gelu_would_be_caught():
    """The comparison above can fail: tanh GeLU in the unfused path changes the outputs."""
    def tanh_gelu(x, w1, w2, s1, s2, accumulate):
        h = fp8_matmul.fp8_matmul(x, w1, "delayed", s1)
        return fp8_matmul.fp8_matmul(F.gelu(h, approximate="tanh"), w2, "delayed", s2)
    want, _, _ = train(tanh_gelu, False, steps=2)
    got, _, _ = train(fused, False, steps=2)
    assert not all(torch.equal(a, b) for a, b in zip(got, want))


def exact_operands():
    """GeLU inputs where GeLU and its gradient are exact in fp32 and every value an FP8 value, so
    the interpreter's FP8 and bf16 conversions (which do not round as the GPU does:
    test_fp8_cast_gpu.py) change nothing: h >= 8 (GeLU(h) = h, slope 1) or h <= -16 (GeLU 0,
    slope 0), mixed element by element, so a misaddressed h shows; the gradient FP8 values in [-8, 8]."""
    g = torch.Generator().manual_seed(0)
    def fp8_values(lo, hi):
        v = torch.randint(0, 256, (140, 300), generator=g, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
        return torch.where(torch.isfinite(v) & (v.abs() >= lo) & (v.abs() <= hi), v.abs(), torch.full_like(v, lo))
    positive = torch.randint(0, 2, (140, 300), generator=g).bool()
    h = torch.where(positive, fp8_values(8, 224), -fp8_values(16, 224)).to(torch.bfloat16)
    sign = torch.randint(0, 2, (140, 300), generator=g).float() * 2 - 1
    da = (fp8_values(2.0 ** -6, 8) * sign).to(torch.bfloat16)
    return h, da, positive


def compare_all() -> dict:
    """The GPU kernel's prologues in Triton's interpreter (a child process: TRITON_INTERPRET=1) against
    torch's GeLU and GeLU backward, on values where no rounding happens (exact_operands). The erf
    arithmetic in between is compared byte for byte on the GPU (benchmarks/speed/fp8_gelu_mlp.py)."""
    from helpers.precision import fp8_cast_gpu
    h, da, positive = exact_operands()
    out = {"construction": bool(torch.equal(F.gelu(h).float(), torch.where(positive, h.float(), 0.0))
                                and torch.equal(torch.ops.aten.gelu_backward(da, h).float(),
                                                torch.where(positive, da.float(), 0.0)))}
    for shape in ("ragged", "whole_tiles"):  # 140 x 300, and 128 x 128: whole tiles, no masks (EVEN)
        if shape == "whole_tiles":
            h, da = h[:128, :128].contiguous(), da[:128, :128].contiguous()
        for name, value, kwargs in (("gelu", F.gelu(h), {"prologue": "gelu"}),
                                    ("gelu_backward", torch.ops.aten.gelu_backward(da, h),
                                     {"prologue": "gelu_backward", "h": h})):
            bits = torch.zeros((), dtype=torch.int32)
            q, qt = fp8_cast_gpu.delayed_cast(h if name == "gelu" else da, 448.0, torch.float8_e4m3fn,
                                              torch.tensor(1.0), bits, True, True, **kwargs)
            out[f"{name}_{shape}"] = {"equal": bool(torch.equal(q.float(), value.float())),
                                      "transposed": bool(torch.equal(qt.float(), value.float().t())),
                                      "amax": float(bits.view(torch.float32)) == float(value.float().abs().max())}
    def refusal(**kwargs):
        """The ValueError delayed_cast raises for these arguments (None if it accepts them)."""
        try:
            fp8_cast_gpu.delayed_cast(h, 448.0, torch.float8_e4m3fn, torch.tensor(1.0),
                                      torch.zeros((), dtype=torch.int32), **kwargs)
        except ValueError as e:
            return str(e)
        return None
    errors = {"no_h": refusal(prologue="gelu_backward"), "h_without_prologue": refusal(h=h),
              "unknown": refusal(prologue="relu")}
    out["errors"] = errors
    return out


@pytest.fixture(scope="module")
def compared(triton_interpreter):
    return triton_interpreter(__file__)


@pytest.mark.parametrize("case", [f"{p}_{s}" for p in ("gelu", "gelu_backward") for s in ("ragged", "whole_tiles")])
def test_kernel_prologue_computes_torchs_op_before_the_cast(compared, case):
    assert compared["construction"]
    assert compared[case] == {"equal": True, "transposed": True, "amax": True}


def test_kernel_prologue_inputs_checked(compared):
    errors = compared["errors"]
    assert "needs the GeLU's input h" in errors["no_h"]
    assert "needs the GeLU's input h" in errors["h_without_prologue"]
    assert "unknown prologue 'relu'" in errors["unknown"]


if __name__ == "__main__":
    print(json.dumps(compare_all()))
