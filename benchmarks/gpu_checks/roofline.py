"""The roofline model's compute term against a measured step, on one GPU: the 1.4B GPT of the
throughput benchmark (24 layers, hidden 2048, 16 heads, FFN 8192, vocabulary 50304; sequence 2048,
micro batch 4, global batch 32, bf16).

1. times every GEMM of one layer and the output layer at the job's shapes (forward X.W, backward
   dY.W^T and X^T.dY) and the causal attention core (torch SDPA, flash) forward + backward, with
   CUDA events: the achieved TFLOP/s of each, and the device memory's copy bandwidth
   (helpers/perf/rates.py keeps them);
2. runs the kit's training job of that model (helpers.launch.run, the throughput benchmark's job)
   and takes its median step time.

    python -m benchmarks.gpu_checks.roofline --out DIR

Writes DIR/roofline_results.json; docs/results/roofline.md quotes it and
benchmarks/gpu_checks/roofline_results.json keeps it beside this script."""
import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from benchmarks.common.cuda_timing import timed_ms
from helpers import launch
from helpers.job import models
from helpers.job.layout import Layout
from helpers.perf import layer_gemms

MODEL = dict(num_layers=24, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=8192, vocab_size=50304,
             max_seq_len=2048)
SEQ, MICRO, GLOBAL = 2048, 4, 32


def timed(fn) -> float:
    return timed_ms(fn) / 1e3


def gemm_rate(shapes: list[tuple[int, int, int]]) -> dict:
    """Seconds and FLOPs of forward + backward of X[m,k].W[k,n] for each shape, bf16."""
    seconds = flops = 0.0
    rows = []
    for m, k, n in shapes:
        x, w, dy = (torch.randn(a, b, device="cuda", dtype=torch.bfloat16) for a, b in ((m, k), (k, n), (m, n)))
        t = timed(lambda: x @ w) + timed(lambda: dy @ w.t()) + timed(lambda: x.t() @ dy)
        f = 3 * 2 * m * k * n
        rows.append({"m": m, "k": k, "n": n, "seconds": t, "tflops": f / t / 1e12})
        seconds, flops = seconds + t, flops + f
    return {"rows": rows, "seconds": seconds, "flops": flops, "tflops": flops / seconds / 1e12}


def attention_rate(batch: int, heads: int, seq: int, dim: int) -> dict:
    q, k, v = (torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16)

    def fwd_bwd():
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad)
    t = timed(fwd_bwd)
    f = 3 * 2 * batch * heads * seq * seq * (dim + dim)  # the full square, as Megatron's FLOPs count
    return {"seconds": t, "flops": f, "tflops": f / t / 1e12}


def hbm_rate(gib: float = 2.0) -> dict:
    """Device-memory bandwidth as a large copy achieves it (bytes read + written per second)."""
    x = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    t = timed(lambda: y.copy_(x))
    return {"seconds": t, "bytes": 2 * x.numel(), "gb_per_s": 2 * x.numel() / t / 1e9}


def elementwise_rate(tokens: int, hidden: int, ffn: int) -> dict:
    """The memory-bound kernels of one layer at the job's shapes, forward + backward: two layer norms,
    two residual adds, GeLU. Bytes as helpers/perf/roofline.py counts them (bf16 elements read and
    written: norms 2h forward + 3h backward each, adds 3h each way, GeLU 2F + 3F); the achieved rate is
    what the model applies to every memory-bound byte."""
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    u = torch.randn(tokens, ffn, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dr, dg = torch.ones_like(x), torch.ones_like(u)

    def fwd_bwd():
        r1 = torch.nn.functional.layer_norm(x, (hidden,), w) + x
        r2 = torch.nn.functional.layer_norm(r1, (hidden,), w) + r1
        g = torch.nn.functional.gelu(u)
        torch.autograd.backward([r2, g], [dr, dg])
    t = timed(fwd_bwd)
    counted = tokens * (2 * (2 + 3) * hidden + 2 * 3 * hidden * 2 + (2 + 3) * ffn) * 2
    return {"seconds": t, "bytes": counted, "gb_per_s": counted / t / 1e9}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--iters", type=int, default=8)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = models.preset("tiny-gpt").with_(**MODEL)
    one_rank = Layout(seq_len=SEQ, micro_batch=MICRO)
    gemms = layer_gemms.of_kind(model, one_rank, "dense") + [layer_gemms.output_layer(model, one_rank)]
    gemm = gemm_rate([(g.m, g.k, g.n) for g in gemms])
    hbm = hbm_rate()
    elementwise = elementwise_rate(SEQ * MICRO, model.hidden_size, model.ffn_hidden_size)
    attn = attention_rate(MICRO, model.num_attention_heads, SEQ, model.hidden_size // model.num_attention_heads)
    run = launch.run(model="tiny-gpt", model_overrides=MODEL, seq_len=SEQ, micro_batch=MICRO, global_batch=GLOBAL,
                     iters=args.iters, device="cuda", precision="bf16", attention="sdpa", progress=False,
                     out=str(args.out / "runs"))
    steps = [m["step_time_s"] for m in run.metrics][3:-1]  # warm-up, and the last (the report card's replica check)
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "host": platform.node(),
              "date": time.strftime("%Y-%m-%d"), "model": MODEL, "seq_len": SEQ, "micro_batch": MICRO,
              "global_batch": GLOBAL, "gemm": gemm, "attention": attn, "hbm": hbm, "elementwise": elementwise,
              "measured_step_s": statistics.median(steps), "step_times_s": steps,
              "command": "python -m benchmarks.gpu_checks.roofline --out DIR"}
    (args.out / "roofline_results.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("gemm",)}, indent=1))
    print("gemm TFLOP/s", gemm["tflops"])


if __name__ == "__main__":
    main()
