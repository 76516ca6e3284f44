"""Hybrid Mamba-2/attention/MoE (Nemotron-H) on one GPU: the kit's pure-torch
Mamba-2 (helpers/runtime/layers/mamba/) on CUDA, and the memory planner's peak against torch's measured
peak for several layouts of a random Nemotron-H imported through Megatron-Bridge (NCCL, bf16).
Writes OUT/results.json; the plan is computed here too (the planner needs no GPU).

  scan:   ssd_scan on CUDA in fp32 (chunks of 128) vs the sequential recurrence in fp64 on the CPU;
          forward+backward time of one Nemotron-3-Nano-sized mixer's math (conv, scan, gated norm)
  peaks:  launch.run(hf_model=..., device="cuda") per layout -> device_memory.json vs plan_memory

    python -m benchmarks.gpu_checks.hybrid_memory --out DIR [--layouts s4096-mb1,s2048-mb2,s1024-mb4]
    python -m benchmarks.gpu_checks.hybrid_memory --out DIR --smoke     # tiny model, CPU, the same steps
"""
import argparse
import json
import time
from pathlib import Path

import torch

from helpers import launch
from helpers.job.layout import Layout
from helpers.launch import tiny_hf
from helpers.memory.vs_measured import peak_rows
from helpers.runtime.layers.mamba import ssd

ENV = {"NCCL_NVLS_ENABLE": "0"}
# Nemotron-H widths at 8 layers: Mamba 32 heads x 64 (inner 2 x hidden), 8 groups, state 128, chunk 128;
# attention 16 heads / 4 KV heads; 8 squared-ReLU experts top-2 + a shared one; one dense MLP.
GPU_MODEL = dict(hidden_size=1024, layers_block_type=["mamba", "moe", "mamba", "attention", "mamba", "mlp",
                                                      "mamba", "moe"],
                 mamba_num_heads=32, mamba_head_dim=64, n_groups=8, ssm_state_size=128, chunk_size=128,
                 num_attention_heads=16, num_key_value_heads=4, head_dim=64, intermediate_size=4096,
                 n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=1024,
                 moe_shared_expert_intermediate_size=2048, vocab_size=32768, max_position_embeddings=8192,
                 initializer_range=0.02)
LAYOUTS = {"s4096-mb1": dict(seq_len=4096, micro_batch=1), "s2048-mb2": dict(seq_len=2048, micro_batch=2),
           "s1024-mb4": dict(seq_len=1024, micro_batch=4), "s8192-mb1": dict(seq_len=8192, micro_batch=1)}


def scan_check(device: str, smoke: bool) -> dict:
    """The chunked scan on the device against the fp64 recurrence; fwd+bwd time of a mixer's math."""
    g = torch.Generator().manual_seed(0)
    b, length, h, p, groups, n = (1, 96, 4, 8, 2, 16) if smoke else (1, 1024, 8, 64, 2, 128)
    x = torch.randn(b, length, h, p, generator=g, dtype=torch.float64)
    dt = torch.nn.functional.softplus(torch.randn(b, length, h, generator=g, dtype=torch.float64) - 2)
    A = -torch.rand(h, generator=g, dtype=torch.float64) * 4 - 0.5
    B, C = (torch.randn(b, length, groups, n, generator=g, dtype=torch.float64) for _ in range(2))
    ref = ssd.sequential_scan(x, dt, A, B, C)
    dev = [t.to(device, torch.float32) for t in (x, dt, A, B, C)]
    y = ssd.ssd_scan(*dev, chunk_size=128).double().cpu()
    out = {"shape": [b, length, h, p, groups, n],
           "max_rel_diff_fp32_vs_fp64": float((y - ref).abs().max() / ref.abs().max())}
    # One Nemotron-3-Nano Mamba layer's math (64 heads x 64, 8 groups, state 128), bf16, 4096 tokens.
    b, length, h, p, groups, n = (1, 256, 4, 8, 2, 16) if smoke else (1, 4096, 64, 64, 8, 128)
    inner, conv = h * p, h * p + 2 * groups * n
    mk = lambda *s: torch.randn(*s, device=device, dtype=torch.bfloat16, requires_grad=True)  # noqa: E731
    xbc, z, dt_raw = mk(b, length, conv), mk(b, length, inner), mk(b, length, h)
    w, bias, norm_w = mk(conv, 1, 4), mk(conv), mk(inner)
    A = -torch.rand(h, device=device) - 0.5

    def step():
        xs, Bs, Cs = torch.split(ssd.causal_conv1d(xbc, w, bias), [inner, groups * n, groups * n], -1)
        y = ssd.ssd_scan(xs.reshape(b, length, h, p), torch.nn.functional.softplus(dt_raw.float()), A,
                         Bs.reshape(b, length, groups, n), Cs.reshape(b, length, groups, n), 128)
        ssd.gated_rmsnorm(y.reshape(b, length, inner), z, norm_w, inner // groups, 1e-5).float().sum().backward()

    for _ in range(2):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    t0, reps = time.perf_counter(), 5
    for _ in range(reps):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    out["nano_layer_fwd_bwd_ms"] = (time.perf_counter() - t0) / reps * 1e3
    out["nano_layer_shape"] = [b, length, h, p, groups, n]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--layouts", default="s4096-mb1,s2048-mb2,s1024-mb4")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.smoke else "cuda"
    results = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
               "scan": scan_check(device, args.smoke)}
    print(json.dumps(results["scan"]), flush=True)
    folder = tiny_hf.make("nemotronh", args.out / "nemotronh", **({} if args.smoke else GPU_MODEL))
    results["model"] = json.loads((folder / "config.json").read_text())
    for name in args.layouts.split(","):
        fields = dict(LAYOUTS[name], **({"seq_len": 64, "micro_batch": 2} if args.smoke else {}))
        t0 = time.time()
        try:
            run = launch.run(hf_model=str(folder), device=device, iters=args.iters, lr=3e-4, env=ENV, timeout_s=300,
                             progress=False, out=str(args.out / "runs"), name=name, **fields)
        except Exception as e:  # keep going: one failing layout should not hide the others
            results[name] = {"error": str(e)[:2000]}
            print(name, "FAILED", str(e)[:1000], flush=True)
            continue
        path = run.path / "device_memory.json"
        peaks = json.loads(path.read_text()) if path.exists() else None
        rows = peak_rows(run.spec, peaks) if peaks else None
        results[name] = {"spec": run.spec.to_dict(), "peaks": peaks, "rows": rows, "losses": run.losses,
                         "tokens_per_s": [m.get("tokens_per_s") for m in run.metrics], "wall_s": time.time() - t0,
                         "layout": Layout.of(run.spec).describe()}
        print(name, json.dumps({"rows": rows, "losses": run.losses}), flush=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
    (args.out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
