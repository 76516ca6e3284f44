"""How close to its peak a GPU runs a training GEMM, by size: the achieved-efficiency classes of the
layout advisor's time model (helpers/perf/gemm.py), measured on one GPU in bf16.

1. each GEMM shape forward + backward (X.W, dY.W^T, X^T.dY: the three products a linear layer
   runs per microbatch), over tokens x (hidden -> width) and (width -> hidden) for the widths a
   tensor-parallel shard of a layer has;
2. the batched products of an attention that materialises its s x s scores (Q.K^T, P.V and their
   backward), the softmax + dropout bytes around them, and the fused (flash) attention of torch's SDPA;
3. the layer norms, residual adds and GeLU of benchmarks/gpu_checks/roofline.py at several sizes, and
   a large copy (the device memory's bandwidth).

    python -m benchmarks.advisor.gemm_sizes --out DIR

Writes DIR/gemm_sizes_results.json (kept beside this script as gemm_sizes_results.json)."""
import argparse
import json
import platform
import time
from pathlib import Path

import torch

from benchmarks.common.cuda_timing import timed_ms

TOKENS = [256, 1024, 4096, 16384, 32768]
HIDDEN = [1024, 4096, 12288]
WIDTHS = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]


def reps_for(flops: float) -> int:
    return 5 if flops > 2e12 else 20


def gemm(m: int, k: int, n: int) -> dict:
    x, w, dy = (torch.randn(a, b, device="cuda", dtype=torch.bfloat16) for a, b in ((m, k), (k, n), (m, n)))
    f = 3 * 2 * m * k * n
    r = reps_for(f)
    t = (timed_ms(lambda: x @ w, r) + timed_ms(lambda: dy @ w.t(), r) + timed_ms(lambda: x.t() @ dy, r)) / 1e3
    del x, w, dy
    return {"m": m, "k": k, "n": n, "flops": f, "seconds": t, "tflops": f / t / 1e12}


def materialised_attention(batch_heads: int, seq: int, dim: int) -> dict:
    """Q.K^T and P.V forward and backward as batched GEMMs; softmax and dropout on the scores."""
    q, k, v = (torch.randn(batch_heads, seq, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    p = torch.randn(batch_heads, seq, seq, device="cuda", dtype=torch.bfloat16)
    do = torch.randn(batch_heads, seq, dim, device="cuda", dtype=torch.bfloat16)
    products = [lambda: torch.bmm(q, k.transpose(1, 2)), lambda: torch.bmm(p, v),  # forward
                lambda: torch.bmm(do, v.transpose(1, 2)), lambda: torch.bmm(p.transpose(1, 2), do),  # P.V backward
                lambda: torch.bmm(p, k), lambda: torch.bmm(p.transpose(1, 2), q)]  # Q.K^T backward
    t_gemm = sum(timed_ms(fn, 10) for fn in products) / 1e3
    flops = 6 * 2 * batch_heads * seq * seq * dim
    s = p.requires_grad_(True)

    def softmax_dropout():
        y = torch.nn.functional.dropout(torch.softmax(s.float(), -1).to(torch.bfloat16), 0.1)
        y.backward(torch.ones_like(y))
    t_soft = timed_ms(softmax_dropout, 10) / 1e3
    del q, k, v, p, do, s
    return {"batch_heads": batch_heads, "seq": seq, "dim": dim, "gemm_flops": flops, "gemm_seconds": t_gemm,
            "gemm_tflops": flops / t_gemm / 1e12, "softmax_dropout_seconds": t_soft,
            "score_elements": batch_heads * seq * seq}


def flash_attention(batch: int, heads: int, seq: int, dim: int) -> dict:
    q, k, v = (torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16)

    def fwd_bwd():
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)
    t = timed_ms(fwd_bwd, 10) / 1e3
    f = 3 * 2 * batch * heads * seq * seq * 2 * dim  # the full square, as Megatron counts it
    return {"batch": batch, "heads": heads, "seq": seq, "dim": dim, "flops": f, "seconds": t, "tflops": f / t / 1e12}


def elementwise(tokens: int, hidden: int) -> dict:
    """Two layer norms, two residual adds and a GeLU over 4h, forward + backward: the kernels and the
    byte count of benchmarks/gpu_checks/roofline.py's elementwise_rate, at other sizes."""
    ffn = 4 * hidden
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    u = torch.randn(tokens, ffn, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dr, dg = torch.ones_like(x), torch.ones_like(u)

    def fwd_bwd():
        r1 = torch.nn.functional.layer_norm(x, (hidden,), w) + x
        r2 = torch.nn.functional.layer_norm(r1, (hidden,), w) + r1
        g = torch.nn.functional.gelu(u)
        torch.autograd.backward([r2, g], [dr, dg])
    t = timed_ms(fwd_bwd, 10) / 1e3
    counted = tokens * (2 * (2 + 3) * hidden + 2 * 3 * hidden * 2 + (2 + 3) * ffn) * 2
    del x, u, w, dr, dg
    return {"tokens": tokens, "hidden": hidden, "bytes": counted, "seconds": t, "gb_per_s": counted / t / 1e9}


def copy_rate(gib: float = 2.0) -> dict:
    x = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    t = timed_ms(lambda: y.copy_(x)) / 1e3
    return {"bytes": 2 * x.numel(), "seconds": t, "gb_per_s": 2 * x.numel() / t / 1e9}


CLASS_BOUNDS = [2.5e8, 1e9, 4e9, 1.6e10, 6.4e10]  # FLOPs of one product: the size classes' lower bounds
FLASH_BOUNDS = [4e9, 1.6e10, 6.4e10, 2.56e11]  # forward FLOPs of one attention call (the full square)


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


def gemm_size_classes(result: dict) -> list[tuple[float, float]]:
    """[(least FLOPs, fraction of the large-GEMM rate)], smallest first: per class the median
    achieved rate of its shapes whose bytes do not bound them (at the measured copy bandwidth and
    the large class's rate; all of its shapes where every one is so small that its bytes would),
    over the median of the largest class (>= 6.4e10 FLOPs)."""
    copy = result["copy"]["gb_per_s"] * 1e9
    rows = [(2 * g["m"] * g["k"] * g["n"], g["tflops"], 2 * (g["m"] * g["k"] + g["k"] * g["n"] + g["m"] * g["n"]))
            for g in result["gemm"]]
    large = _median([t for f, t, _ in rows if f >= CLASS_BOUNDS[-1]])
    bounds = [0.0] + CLASS_BOUNDS + [float("inf")]
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        in_class = [(t, f / (large * 1e12) >= b / copy) for f, t, b in rows if lo <= f < hi]
        rates = [t for t, flops_bound in in_class if flops_bound] or [t for t, _ in in_class]
        out.append((lo, round(_median(rates) / large, 3)))
    return out


def flash_size_classes(result: dict, anchor_tflops: float) -> list[tuple[float, float]]:
    """[(least forward FLOPs, achieved rate / anchor_tflops)] for torch SDPA's flash attention."""
    rows = [(f["flops"] / 3, f["tflops"]) for f in result["flash_attention"]]
    bounds = [0.0] + FLASH_BOUNDS + [float("inf")]
    return [(lo, round(_median([t for f, t in rows if lo <= f < hi]) / anchor_tflops, 3))
            for lo, hi in zip(bounds, bounds[1:])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    gemms = []
    for h in HIDDEN:
        for w in WIDTHS:
            for m in TOKENS:
                gemms.append(gemm(m, h, w))
                gemms.append(gemm(m, w, h))
        print(f"hidden {h}: {len(gemms)} shapes, {time.time() - start:.0f} s", flush=True)
    attention = [materialised_attention(bh, s, d) for s in (1024, 2048, 4096) for d in (64, 96, 128)
                 for bh in (8, 32)]
    flash = [flash_attention(b, hd, s, d) for s in (1024, 2048, 4096) for d in (64, 128) for b, hd in ((1, 8), (4, 16))]
    elementwise_rows = [elementwise(t, h) for t in (1024, 4096, 16384, 65536) for h in (1024, 4096, 12288)
                        if t * h <= 2**28]
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "host": platform.node(),
              "date": time.strftime("%Y-%m-%d"), "command": "python -m benchmarks.advisor.gemm_sizes --out DIR",
              "gemm": gemms, "materialised_attention": attention, "flash_attention": flash,
              "elementwise": elementwise_rows, "copy": copy_rate(),
              "seconds": time.time() - start}
    (args.out / "gemm_sizes_results.json").write_text(json.dumps(result, indent=1))
    tables = ("gemm", "materialised_attention", "flash_attention", "elementwise")
    print(json.dumps({k: v for k, v in result.items() if k not in tables}))


if __name__ == "__main__":
    main()
