"""Host (CPU) time of the kit's FP8 linear on a GPU, taken apart: is the FP8 training step host-bound?

Why: an FP8 step whose GPU kernels add up to less than bf16's can still take as long as bf16's
when the host cannot queue them fast enough (one FP8 linear's forward + backward costs several times
bf16's host time, more than its parts measured alone add up to; docs/results/gpu_profile.md).
This script measures, on matrices small enough that the GPU is never the limit (64 x 64), the
host microseconds per call of:

  * bf16 forward+backward, FP8 forward+backward (tensorwise, rowwise, delayed; with and without the per-step
    weight cache of fp8_matmul.training_step);
  * the same with the quantiser, then `_scaled_mm`, replaced by stubs that return ready tensors
    (what is left is the autograd Function and its Python);
  * the parts alone: amax (`vector_norm`), `torch.empty`, the Triton quantiser, `_scaled_mm`;
  * where the host time goes: FP8Matmul's forward and backward called directly with a stand-in
    ctx (so both run in this thread, which cProfile watches: autograd runs a CUDA backward in its
    own thread), under cProfile, and the real autograd call under torch.profiler (host time per op);
and, at the real FC1 size (8192 x 2048 -> 8192), host time to queue a call against GPU time per call.

    python -m benchmarks.speed.fp8_host --out DIR     (writes DIR/fp8_host.json, DIR/cprofile_*.txt,
                                                                     DIR/torch_profile_tensorwise.txt)
"""
import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path


def host_us(fn, n=300) -> float:
    """Microseconds per call, host clock, one synchronisation at the end (tiny matrices: the GPU
    finishes each call long before the host has queued the next)."""
    import torch
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def forward_backward(fn, x, w, dy, persistent_weight=False):
    def go():
        xx = x.detach().requires_grad_()
        ww = w if persistent_weight else w.detach().requires_grad_()
        fn(xx, ww).backward(dy)
    return go


def fp8_call(recipe, streams, a, b):
    from helpers.precision import fp8_matmul
    return fp8_matmul.fp8_matmul(a, b, recipe, streams)


def tiny(out: dict):
    import torch

    from helpers.precision import formats, fp8_cast_gpu, fp8_matmul
    x, w, dy = (torch.randn(64, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    w_param = w.clone().requires_grad_()  # one tensor across calls: the cache can hit
    f = formats.get("e4m3")
    q, qt, s = fp8_cast_gpu.scale_cast(x, f.max, f.dtype, None, True, True)
    ready = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
    r = {}
    r["bf16_fwd_bwd"] = host_us(forward_backward(lambda a, b: a @ b.t(), x, w, dy))
    for recipe in ("tensorwise", "rowwise", "delayed"):
        streams = fp8_matmul.DelayedStreams() if recipe == "delayed" else None
        fp8 = partial(fp8_call, recipe, streams)
        if streams:  # one step first, so that the histories exist and the delayed kernel runs
            with fp8_matmul.training_step():
                forward_backward(fp8, x, w, dy)()
        r[f"fp8_{recipe}_fwd_bwd"] = host_us(forward_backward(fp8, x, w, dy))
        with fp8_matmul.training_step():
            r[f"fp8_{recipe}_fwd_bwd_weight_cached"] = host_us(forward_backward(fp8, x, w_param, dy, True))
    fp8 = lambda a, b: fp8_matmul.fp8_matmul(a, b, "tensorwise")
    real_quantize, real_mm = fp8_matmul.quantize, fp8_matmul.scaled_mm
    fp8_matmul.quantize = lambda t, fmt, dim=None, plain=True, transposed=False: (q if plain else None,
                                                                                 qt if transposed else None, s)
    try:
        r["fp8_tensorwise_quantiser_stubbed"] = host_us(forward_backward(fp8, x, w, dy))
        fp8_matmul.scaled_mm = lambda *a, **k: ready
        r["fp8_tensorwise_quantiser_and_scaled_mm_stubbed"] = host_us(forward_backward(fp8, x, w, dy))
    finally:
        fp8_matmul.quantize, fp8_matmul.scaled_mm = real_quantize, real_mm
    r["vector_norm_inf"] = host_us(lambda: torch.linalg.vector_norm(x, float("inf")))
    r["torch_empty_fp8"] = host_us(lambda: torch.empty((64, 64), dtype=torch.float8_e4m3fn, device="cuda"))
    r["triton_quantiser_both_layouts"] = host_us(lambda: fp8_cast_gpu.scale_cast(x, f.max, f.dtype, None, True, True))
    r["scaled_mm"] = host_us(lambda: torch._scaled_mm(q, qt.t(), s, s, out_dtype=torch.bfloat16))
    r["bf16_mm"] = host_us(lambda: x @ w.t())
    out["tiny_64_host_us_per_call"] = r
    print("host us per call (64 x 64):", json.dumps({k: round(v, 1) for k, v in r.items()}), flush=True)


class StandInCtx:
    """What FP8Matmul's forward and backward use of autograd's ctx, without autograd."""
    needs_input_grad = (True, True, False, False)

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


def where_host_time_goes(out: dict, files: Path):
    import cProfile
    import io
    import pstats

    import torch

    from helpers.precision import fp8_matmul
    x, w, dy = (torch.randn(64, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    r = {}
    for recipe in ("tensorwise", "delayed"):
        streams = fp8_matmul.DelayedStreams() if recipe == "delayed" else None
        if streams:
            with fp8_matmul.training_step():
                forward_backward(partial(fp8_call, recipe, streams), x, w, dy)()

        def direct(recipe=recipe, streams=streams):
            ctx = StandInCtx()
            fp8_matmul.FP8Matmul.forward(ctx, x, w, recipe, streams)
            fp8_matmul.FP8Matmul.backward(ctx, dy)
        r[f"{recipe}_direct_fwd_bwd_us"] = host_us(direct)
        r[f"{recipe}_forward_only_us"] = host_us(partial(fp8_matmul.fp8_matmul, x, w, recipe, streams))
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            direct()
        torch.cuda.synchronize()
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
        (files / f"cprofile_{recipe}.txt").write_text(text.getvalue())
    go = forward_backward(partial(fp8_call, "tensorwise", None), x, w, dy)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(50):
            go()
        torch.cuda.synchronize()
    table = prof.key_averages()
    (files / "torch_profile_tensorwise.txt").write_text(
        "# 50 fp8 tensorwise forward+backward calls, 64 x 64, by host time (self)\n"
        + table.table(sort_by="self_cpu_time_total", row_limit=40))
    out["host_us_breakdown"] = r
    print("host us:", json.dumps({k: round(v, 1) for k, v in r.items()}), flush=True)


def fc1(out: dict):
    """At the FC1 size: host time to queue N calls (no synchronisation) against GPU time per call."""
    import torch

    from helpers.precision import fp8_matmul
    x = torch.randn(8192, 2048, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(8192, 2048, device="cuda", dtype=torch.bfloat16) * 0.02).requires_grad_()
    dy = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) * 1e-3
    r = {}
    streams = fp8_matmul.DelayedStreams()
    for name, fn in (("bf16", lambda a, b: a @ b.t()), ("fp8_tensorwise", partial(fp8_call, "tensorwise", None)),
                     ("fp8_delayed", partial(fp8_call, "delayed", streams))):
        go = forward_backward(fn, x, w, dy, persistent_weight=True)
        with fp8_matmul.training_step():  # (the first one also makes the delayed histories)
            go()
        with fp8_matmul.training_step():
            for _ in range(3):
                go()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t = time.perf_counter()
            start.record()
            for _ in range(10):
                go()
            queued = time.perf_counter() - t
            end.record()
            torch.cuda.synchronize()
        r[name] = {"host_queue_us": queued / 10 * 1e6, "gpu_us": start.elapsed_time(end) / 10 * 1e3}
    out["fc1_8192x2048x8192"] = r
    print("FC1 forward+backward (weight cached):", json.dumps(r), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    import torch
    args.out.mkdir(parents=True, exist_ok=True)
    out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "command": " ".join(sys.argv)}
    for part in (tiny, partial(where_host_time_goes, files=args.out), fc1):
        try:
            part(out)
        except Exception as e:  # keep the other part's numbers
            name = getattr(part, "__name__", None) or part.func.__name__
            out[name] = {"error": str(e)[-2000:]}
            print(name, "FAILED", str(e)[-2000:], flush=True)
        (args.out / "fp8_host.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
