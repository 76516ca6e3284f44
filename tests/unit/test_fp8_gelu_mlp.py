"""The fused FP8 MLP (helpers/precision/fp8_gelu_mlp.py: FC1, GeLU, FC2 in one Function so that
GeLU's casts can be fused on the GPU) against what it replaces, two FP8 linears with torch's GeLU
between them (fp8_matmul.fp8_matmul, delayed recipe). On the CPU the producers run in torch, so
the two must agree bit for bit over steps of both kinds (the first step's current scaling, then
the histories' scales) and several microbatches: output, all three gradients, every stream's
history. The Megatron-module side, with tensor and sequence parallelism, is test_fp8_mlp.py; the
GPU kernels are test_fp8_gelu_cast_gpu.py and benchmarks/gpu_precision.py."""
from __future__ import annotations

import torch

from helpers.precision import fp8_matmul
from helpers.precision.fp8_gelu_mlp import fp8_gelu_mlp


def weights(seed=0):
    g = torch.Generator().manual_seed(seed)
    w1 = (torch.randn(128, 64, generator=g) * 0.08).to(torch.bfloat16)
    w2 = (torch.randn(48, 128, generator=g) * 0.05).to(torch.bfloat16)
    return w1, w2


def unfused(x, w1, w2, fc1, fc2):
    h = fp8_matmul.fp8_matmul(x, w1, "delayed", fc1)
    return fp8_matmul.fp8_matmul(torch.nn.functional.gelu(h), w2, "delayed", fc2)


def train(mlp, steps=3, microbatches=2):
    """Every output and gradient of `steps` training steps, and the streams' state after them."""
    w1, w2 = (w.clone().requires_grad_() for w in weights())
    fc1, fc2 = fp8_matmul.DelayedStreams(), fp8_matmul.DelayedStreams()
    got = []
    for step in range(steps):
        with fp8_matmul.training_step():
            for micro in range(microbatches):
                g = torch.Generator().manual_seed(100 * step + micro)
                x = (torch.randn(2, 16, 64, generator=g) * (1 + step)).to(torch.bfloat16).requires_grad_()
                dy = torch.randn(2, 16, 48, generator=g).to(torch.bfloat16)
                y = mlp(x, w1, w2, fc1, fc2)
                y.backward(dy)
                got += [y.detach(), x.grad]
        got += [w1.grad.clone(), w2.grad.clone()]
    streams = [fc1.input, fc1.grad_output, fc2.input, fc2.grad_output]
    got += [s.history.clone() for s in streams] + [s.scale.clone() for s in streams]
    return got


def test_fused_mlp_equals_two_fp8_linears_with_torch_gelu_bit_for_bit():
    want, got = train(unfused), train(fp8_gelu_mlp)
    assert len(got) == len(want) == 3 * (4 + 2) + 8
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == b.dtype and torch.equal(a, b), i
    # the comparison is not vacuous: later steps quantise with the histories' scales, and the
    # gradients are FP8's (a percent away from the bf16 product), not zeros
    assert all(float(h[1]) > 0 for h in got[-8:-4])
    assert float(got[2 * 2].abs().max()) > 0 and float(got[-9].abs().max()) > 0


def test_the_producers_are_what_each_stream_quantises(monkeypatch):
    """FC2's input stream quantises GeLU's output and FC1's gradient stream GeLU's input
    gradient, through quantize_produced (the GPU's fused kernels' entry), not as bf16 tensors."""
    seen = []
    real = fp8_matmul.DelayedStream.quantize_produced

    def spy(self, producer, inputs, *args, **kwargs):
        seen.append((producer.name, self.fmt, tuple(inputs[0].shape)))
        return real(self, producer, inputs, *args, **kwargs)

    monkeypatch.setattr(fp8_matmul.DelayedStream, "quantize_produced", spy)
    train(fp8_gelu_mlp, steps=1, microbatches=1)
    assert seen == [("gelu", "e4m3", (32, 128)), ("gelu_backward", "e5m2", (32, 128))]
