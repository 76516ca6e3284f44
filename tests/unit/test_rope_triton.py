"""The Triton rotary (helpers/runtime/layers/rotary_triton.py) in Triton's interpreter on CPU, against the
kit's torch rotary (compiled_rope.rotary, itself Megatron's formula bit for bit:
test_compiled_rope.py) in float64 from the same bf16 inputs: forward and backward, on a query
that is a strided view of a QKV output (as Megatron's attention passes it), with a batch x heads
count that does not fill the last block of rows, and mscale != 1.

Tolerance, from the two roundings the kernel makes: cos and sin to bf16, and the result to bf16.
The interpreter truncates where the GPU rounds to nearest, so each costs up to one bf16 step
(2^-7 relative, 2^-8 on the GPU): |error| <= 2^-7 (|ref| + |x1| + |x2|) per element, x1 and x2 the
pair the element is made of. A wrong sign, a swapped half or a wrong row's frequencies is off by
O(|x|), far outside it; test_bound_is_tight checks the bound rejects a sign error."""
from __future__ import annotations

import json

import pytest
import torch


def inputs():
    g = torch.Generator().manual_seed(0)
    s, b, h, d = 6, 3, 7, 32  # 21 rows per position: a full block of 16 and a ragged one
    mixed = torch.randn(s, b, h, 3 * d, generator=g).to(torch.bfloat16)
    q = mixed[..., :d]  # a view: strides of the QKV output, last dimension contiguous
    freqs = torch.randn(s, 1, 1, d // 2, generator=g, dtype=torch.float32) * 3
    freqs = torch.cat([freqs, freqs], dim=-1)  # Megatron's layout: the same frequencies twice
    grad = torch.randn(s, b, h, d, generator=g).to(torch.bfloat16)
    return q, freqs, grad


def run_kernel() -> dict:
    from helpers.runtime.layers import rotary_triton as rope_triton
    q, freqs, grad = inputs()
    assert rope_triton.applies(q, freqs)
    out = rope_triton._rotate(q, freqs, 0.8, backward=False)
    dq = rope_triton._rotate(grad, freqs, 0.8, backward=True)
    return {"out": out.float().tolist(), "dq": dq.float().tolist(), "contiguous": out.is_contiguous()}


def reference():
    from helpers.runtime.layers.rotary import rotary
    q, freqs, grad = inputs()
    q64 = q.double().requires_grad_()
    c, s = (torch.cos(freqs) * 0.8).to(torch.bfloat16).double(), (torch.sin(freqs) * 0.8).to(torch.bfloat16).double()
    x1, x2 = torch.chunk(q64, 2, dim=-1)
    out = q64 * c + torch.cat((-x2, x1), dim=-1) * s
    (dq,) = torch.autograd.grad(out, q64, grad.double())
    # the same formula as the kit's torch rotary (which, given fp32, keeps cos and sin in fp32:
    # they differ from the bf16-rounded ones by < 2^-9, times |x| < 5 here)
    assert torch.allclose(out.float(), rotary(q.float(), freqs, 0.8), atol=0.01)
    return out, dq, q.double(), grad.double(), swap_halves


def swap_halves(t):
    """Each element's partner in the rotation (the other half's element at the same index)."""
    return torch.cat([t[..., t.shape[-1] // 2:], t[..., : t.shape[-1] // 2]], dim=-1)


def within_bound(got, want, x, pair) -> bool:
    return bool(((got - want).abs() <= 2.0 ** -7 * (want.abs() + x.abs() + pair(x).abs())).all())


@pytest.fixture(scope="module")
def kernel(triton_interpreter):
    got = triton_interpreter(__file__)
    return torch.tensor(got["out"], dtype=torch.float64), torch.tensor(got["dq"], dtype=torch.float64), got


def test_forward_and_backward_match_the_rotary_formula(kernel):
    out, dq, got = kernel
    want_out, want_dq, q, grad, pair = reference()
    assert got["contiguous"]
    assert within_bound(out, want_out, q, pair)
    assert within_bound(dq, want_dq, grad, pair)


def test_bound_is_tight(kernel):
    """The tolerance would catch a kernel with the rotation's sign flipped (forward used as backward)."""
    out, dq, _ = kernel
    want_out, want_dq, q, grad, pair = reference()
    assert not within_bound(out, want_dq, q, pair) and not within_bound(dq, want_out, grad, pair)


def test_what_the_kernel_does_not_cover_goes_to_the_compiled_rotary():
    from helpers.runtime.layers import rotary_triton as rope_triton
    q, freqs, _ = inputs()
    assert not rope_triton.applies(q.float(), freqs)  # fp32
    assert not rope_triton.applies(q, freqs[..., :16].contiguous())  # partial rotary
    assert not rope_triton.applies(q, freqs.to(torch.bfloat16))
    assert not rope_triton.applies(q[..., :24], freqs[..., :24].contiguous())  # not a power of two


if __name__ == "__main__":
    print(json.dumps(run_kernel()))
