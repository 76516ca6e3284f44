"""GPU tier check: the same worker on NCCL + bf16 for several layouts of a GPT-2-small-sized model,
each compared with the 1-GPU run from the same seed checkpoint. Prints a markdown table (loss per
layout vs reference, tokens/s, peak memory) and writes results.json.

    python -m benchmarks.gpu_checks.layouts --out DIR [--iters 20] [--layouts tp2,pp2,dp2]
"""
import argparse
import json
import time
from pathlib import Path

from helpers import launch

SMALL_GPT = dict(num_layers=12, hidden_size=768, num_attention_heads=12, ffn_hidden_size=3072,
                 vocab_size=50304, max_seq_len=1024)
LAYOUTS = {
    "single": dict(),
    "tp2": dict(tp=2),
    "tp2-sp": dict(tp=2, sp=True),
    "pp2": dict(pp=2),
    "dp2": dict(nproc=2),
    "dp2-distopt": dict(nproc=2, dist_opt=True),
    "pp2-vpp2": dict(pp=2, vpp=2),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--layouts", default="single,tp2,pp2,dp2,dp2-distopt")
    args = ap.parse_args()
    job = dict(model="tiny-gpt", model_overrides=SMALL_GPT, iters=args.iters, micro_batch=4, global_batch=32,
               seq_len=1024, lr=3e-4, device="cuda", out=str(args.out / "runs"), progress=False, timeout_s=400)
    results = {}
    for name in args.layouts.split(","):
        t0 = time.time()
        try:
            run = launch.run(**job, **LAYOUTS[name])
        except Exception as e:  # keep going: one failing layout should not hide the others
            results[name] = {"error": str(e)[:2000]}
            print(f"{name}: FAILED {str(e)[:500]}", flush=True)
            continue
        m = run.metrics
        steady = m[len(m) // 2:]  # skip warm-up iterations
        results[name] = {
            "losses": run.losses, "world_size": run.spec.world_size, "wall_s": time.time() - t0,
            "tokens_per_s": sum(x["tokens_per_s"] for x in steady) / len(steady),
            "max_allocated_gib": max(x.get("mem_max_allocated_bytes", 0) for x in m) / 2**30,
            "max_reserved_gib": max(x.get("mem_max_reserved_bytes", 0) for x in m) / 2**30,
            "device": run.ranks[0].get("device_name"), "precision": run.spec.precision,
        }
        print(f"{name}: done in {time.time() - t0:.0f} s, final loss {run.losses[-1]:.4f}", flush=True)
    ref = results.get("single", {}).get("losses")
    print("\n| layout | GPUs | loss it 1 | final loss | max rel. diff vs 1 GPU | tokens/s | peak alloc GiB (rank 0) |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        if "error" in r:
            print(f"| {name} | - | failed | | | | |")
            continue
        diff = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], ref)) if ref else float("nan")
        r["max_rel_diff_vs_single"] = diff
        print(f"| {name} | {r['world_size']} | {r['losses'][0]:.4f} | {r['losses'][-1]:.4f} | {diff:.2e} | "
              f"{r['tokens_per_s']:,.0f} | {r['max_allocated_gib']:.2f} |")
    (args.out / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
