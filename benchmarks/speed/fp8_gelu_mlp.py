"""The dense GeLU MLP in FP8 (delayed recipe), fused (helpers/precision/fp8_gelu_mlp.py: the GeLU and
its gradient computed inside the FP8 casts) against the unfused path it replaces (two FP8 linears of
helpers/precision/fp8_matmul.py around torch's GeLU), on one GPU:
- the same bytes: output, input gradient, both weight gradients accumulated into fp32 main_grad and
  the four amax histories, over three training steps of two microbatches (the first step
  current-scaled, the next ones from the histories, where the fused kernels run); the count of
  differing values is recorded, not assumed;
- the time of one microbatch's forward + backward, median over repeats (CUDA events).

    python -m benchmarks.speed.fp8_gelu_mlp --out OUT [--tokens 16384]

Shapes: the 1.4B GPT's MLP (hidden 2048, FFN 8192), micro batch 8 x sequence 2048 = 16384 tokens.
Writes OUT/fp8_gelu_mlp.json."""
import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from helpers.precision import fp8_matmul
from helpers.precision.fp8_gelu_mlp import fp8_gelu_mlp

HIDDEN, FFN = 2048, 8192


def unfused(x, w1, w2, s1, s2):
    h = fp8_matmul.fp8_matmul(x, w1, "delayed", s1, accumulate=True)
    return fp8_matmul.fp8_matmul(F.gelu(h), w2, "delayed", s2, accumulate=True)


def fused(x, w1, w2, s1, s2):
    return fp8_gelu_mlp(x, w1, w2, s1, s2, accumulate=True)


def setup(tokens: int):
    torch.manual_seed(0)
    w1 = (torch.randn(FFN, HIDDEN, device="cuda") * 0.02).bfloat16().requires_grad_()
    w2 = (torch.randn(HIDDEN, FFN, device="cuda") * 0.02).bfloat16().requires_grad_()
    for w in (w1, w2):
        w.main_grad = torch.zeros(w.shape, dtype=torch.float32, device="cuda")
        w.grad_added_to_main_grad = False
    xs = [torch.randn(tokens, HIDDEN, device="cuda").bfloat16() for _ in range(2)]
    dys = [torch.randn(tokens, HIDDEN, device="cuda").bfloat16() * 1e-3 for _ in range(2)]
    return w1, w2, xs, dys


def run(mlp, tokens: int, steps: int = 3, repeats: int = 20) -> dict:
    w1, w2, xs, dys = setup(tokens)
    s1, s2 = fp8_matmul.DelayedStreams(), fp8_matmul.DelayedStreams()
    outputs = []
    for _ in range(steps):
        with fp8_matmul.training_step():
            for x, dy in zip(xs, dys):
                x = x.clone().requires_grad_()
                y = mlp(x, w1, w2, s1, s2)
                y.backward(dy)
                outputs += [y.detach(), x.grad]
                w1.grad = w2.grad = None
    result = {"outputs": outputs, "main_grads": [w1.main_grad.clone(), w2.main_grad.clone()],
              "histories": [s.history.clone() for s in (s1.input, s1.grad_output, s2.input, s2.grad_output)]}
    times = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with fp8_matmul.training_step():
        x = xs[0].clone().requires_grad_()
        for i in range(repeats + 3):
            torch.cuda.synchronize()
            start.record()
            mlp(x, w1, w2, s1, s2).backward(dys[0])
            end.record()
            torch.cuda.synchronize()
            if i >= 3:
                times.append(start.elapsed_time(end))
            w1.grad = w2.grad = x.grad = None
    result["ms"] = statistics.median(times)
    return result


TILES = [(64, 128, 4), (64, 64, 4), (32, 128, 4), (32, 64, 4), (32, 64, 8), (16, 128, 4)]


def kernel_times(tokens: int) -> dict:
    """Microseconds of each kernel on one [tokens, FFN] activation (median, triton.testing.do_bench):
    torch's GeLU and its backward, the plain delayed cast, and the cast with each prologue, per tile."""
    from triton.testing import do_bench

    from helpers.precision import formats, fp8_cast_gpu
    f = formats.get("e4m3")
    h = torch.randn(tokens, FFN, device="cuda").bfloat16()
    da = torch.randn(tokens, FFN, device="cuda").bfloat16()
    scale, bits = torch.tensor(8.0, device="cuda"), torch.zeros((), dtype=torch.int32, device="cuda")

    def us(fn):
        return do_bench(fn, warmup=10, rep=60, return_mode="median") * 1e3
    out = {"torch_gelu": us(lambda: F.gelu(h)), "torch_gelu_backward": us(lambda: torch.ops.aten.gelu_backward(da, h))}
    defaults = fp8_cast_gpu.DELAYED_CAST_TILE, fp8_cast_gpu.PROLOGUE_CAST_TILE
    for tile in TILES:
        fp8_cast_gpu.DELAYED_CAST_TILE = fp8_cast_gpu.PROLOGUE_CAST_TILE = tile
        name = "x".join(map(str, tile))
        try:
            out[f"cast_{name}"] = us(lambda: fp8_cast_gpu.delayed_cast(h, f.max, f.dtype, scale, bits, True, True))
            out[f"gelu_cast_{name}"] = us(lambda: fp8_cast_gpu.delayed_cast(h, f.max, f.dtype, scale, bits, True, True,
                                                                              "gelu"))
            out[f"gelu_backward_cast_{name}"] = us(lambda: fp8_cast_gpu.delayed_cast(
                da, f.max, f.dtype, scale, bits, True, True, "gelu_backward", h))
        except Exception as e:  # a tile too large for shared memory fails to compile: keep the others
            out[f"error_{name}"] = str(e)[-300:]
    fp8_cast_gpu.DELAYED_CAST_TILE, fp8_cast_gpu.PROLOGUE_CAST_TILE = defaults
    return out


def byte_check(rows: int = 4136) -> dict:
    """The delayed cast's bytes and amax against torch's: the op (none, GeLU, GeLU's backward) in bf16,
    then recipes' arithmetic (fp32 multiply by the scale, clamp to +-max, cast). Inputs with values
    past the format's range, infinities and NaNs, on a row count that leaves the last tile ragged.
    Counts differing bytes outside the NaN positions, and whether NaNs land where torch's do."""
    from helpers.precision import formats, fp8_cast_gpu
    torch.manual_seed(1)
    x = torch.randn(rows, FFN, device="cuda") * 4
    x.view(-1)[::997] = float("inf")
    x.view(-1)[::1009] = -float("inf")
    x.view(-1)[::1013] = float("nan")
    x, h = x.bfloat16(), (torch.randn(rows, FFN, device="cuda") * 3).bfloat16()
    out = {}
    for fmt in ("e4m3", "e5m2"):
        f = formats.get(fmt)
        scale = torch.tensor(f.max / 30.0, device="cuda")  # |x| > 30 saturates
        for prologue in (None, "gelu", "gelu_backward"):
            ref = fp8_matmul.apply_prologue(x, prologue, h if prologue == "gelu_backward" else None).float()
            want = (ref * scale).clamp(-f.max, f.max).to(f.dtype)
            bits = torch.zeros((), dtype=torch.int32, device="cuda")
            q, qt = fp8_cast_gpu.delayed_cast(x, f.max, f.dtype, scale, bits, True, True, prologue,
                                              h if prologue == "gelu_backward" else None)
            nan = ref.isnan()
            got_amax, want_amax = bits.view(torch.float32), ref.abs().amax()
            out[f"{fmt}_{prologue}"] = {
                "differing_bytes": differing(q[~nan].contiguous(), want[~nan].contiguous())
                + differing(qt.t()[~nan].contiguous(), want[~nan].contiguous()),
                "nan_positions_equal": bool(torch.equal(q.float().isnan(), nan) and torch.equal(qt.t().float().isnan(), nan)),
                "amax_nan_kept": bool(got_amax.isnan() and want_amax.isnan()),
            }
            finite = torch.where(x.isfinite(), x, 0)  # the amax of finite values, bit for bit
            bits.zero_()
            fp8_cast_gpu.delayed_cast(finite, f.max, f.dtype, scale, bits, True, True, prologue,
                                      h if prologue == "gelu_backward" else None)
            want_amax = fp8_matmul.apply_prologue(finite, prologue, h if prologue == "gelu_backward" else None).float().abs().amax()
            out[f"{fmt}_{prologue}"]["finite_amax_equal"] = bool(bits.view(torch.float32) == want_amax)
    return out


def differing(a: torch.Tensor, b: torch.Tensor) -> int:
    return int((a.view(torch.uint8) != b.view(torch.uint8)).sum()) if a.dtype.itemsize == 1 else int((a != b).sum())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--kernels", action="store_true", help="also time each kernel alone, per tile (kernel_times)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    checked = byte_check()
    print(json.dumps({"byte_check": checked}, indent=1), flush=True)
    if args.kernels:
        times = kernel_times(args.tokens)
        print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in times.items()}, indent=1),
              flush=True)
    a, b = run(unfused, args.tokens), run(fused, args.tokens)
    report = {
        "what": "dense GeLU MLP in FP8 (delayed), fused GeLU casts against two FP8 linears around torch's GeLU",
        "date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "command": f"python -m benchmarks.speed.fp8_gelu_mlp --out OUT --tokens {args.tokens}"
                   + (" --kernels" if args.kernels else ""),
        "tokens": args.tokens, "hidden": HIDDEN, "ffn": FFN,
        "unfused_ms": a["ms"], "fused_ms": b["ms"], "speedup": a["ms"] / b["ms"],
        "values_compared": sum(t.numel() for t in a["outputs"] + a["main_grads"] + a["histories"]),
        "differing_outputs_and_input_grads": sum(differing(x, y) for x, y in zip(a["outputs"], b["outputs"])),
        "differing_main_grads": sum(differing(x, y) for x, y in zip(a["main_grads"], b["main_grads"])),
        "differing_histories": sum(differing(x, y) for x, y in zip(a["histories"], b["histories"])),
        "kernel_us": times if args.kernels else None,
        "byte_check_against_torch": checked,
        "largest_output_difference": max(float((x.float() - y.float()).abs().max())
                                         for x, y in zip(a["outputs"], b["outputs"])),
    }
    (args.out / "fp8_gelu_mlp.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
