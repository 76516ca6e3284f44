"""GPU tier check for the CP and EP lessons (notebooks 07 and 08): the same worker on NCCL + bf16,
each layout compared with the 1-GPU run of the same model from the same seed checkpoint.

  cp: a GPT-2-small-sized dense model (12 layers, hidden 768, 12 heads), sequence 4096; CP=2 with
      the kit's all-gather context-parallel attention (no Transformer Engine on the GPU machine).
  ep: the seed's control MoE model at full size (`control-moe`: 4 layers, hidden 256, FFN 512,
      8 heads, 2 query groups, 128 experts, top-8, vocabulary 151936); EP=2 with the alltoall and
      allgather dispatchers, and ETP=2.

    python -m benchmarks.gpu_checks.cp_ep --out DIR [--iters 10] [--suites cp,ep]

Prints a markdown table and writes results.json (losses, grad norms, tokens/s, peak memory)."""
import argparse
import json
import time
from pathlib import Path

from helpers import launch

SMALL_GPT = dict(num_layers=12, hidden_size=768, num_attention_heads=12, ffn_hidden_size=3072,
                 vocab_size=50304, max_seq_len=4096)
SUITES = {
    "cp": (dict(model="tiny-gpt", model_overrides=SMALL_GPT, seq_len=4096, micro_batch=1, global_batch=8),
           {"cp-single": dict(), "cp2": dict(cp=2)}),
    "ep": (dict(model="control-moe", seq_len=1024, micro_batch=4, global_batch=16),
           {"ep-single": dict(), "ep2-alltoall": dict(ep=2, nproc=2),
            "etp2": dict(ep=1, etp=2, nproc=2),
            "ep2-allgather": dict(ep=2, nproc=2, moe_dispatcher="allgather")}),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--suites", default="cp,ep")
    ap.add_argument("--deadline-s", type=float, default=None, help="start no new job after this many seconds")
    args = ap.parse_args()
    results = {}
    start = time.time()
    for suite in args.suites.split(","):
        base, layouts = SUITES[suite]
        job = dict(**base, iters=args.iters, lr=3e-4, device="cuda", out=str(args.out / "runs"),
                   progress=False, timeout_s=300)
        ref = None
        for name, layout in layouts.items():
            t0 = time.time()
            if args.deadline_s and t0 - start > args.deadline_s:
                print(f"{name}: skipped (deadline)", flush=True)
                continue
            try:
                run = launch.run(**job, **layout)
            except Exception as e:  # keep going: one failing layout should not hide the others
                results[name] = {"error": str(e)[:2000]}
                print(f"{name}: FAILED {str(e)[:800]}", flush=True)
                continue
            m = run.metrics
            steady = m[len(m) // 2:]
            r = results[name] = {
                "losses": run.losses, "grad_norms": [x["grad_norm"] for x in m], "world_size": run.spec.world_size,
                "wall_s": time.time() - t0, "tokens_per_s": sum(x["tokens_per_s"] for x in steady) / len(steady),
                "max_allocated_gib": max(x.get("mem_max_allocated_bytes", 0) for x in m) / 2**30,
                "device": run.ranks[0].get("device_name"), "precision": run.spec.precision,
                "layout": run.manifest["layout"],
            }
            if ref is None:
                ref = r
            r["max_rel_diff_vs_single"] = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], ref["losses"]))
            r["grad_norm_max_rel_diff"] = max(abs(a - b) / abs(b) for a, b in zip(r["grad_norms"], ref["grad_norms"]))
            print(f"{name}: done in {r['wall_s']:.0f} s, final loss {run.losses[-1]:.4f}, max rel. diff "
                  f"{r['max_rel_diff_vs_single']:.2e}", flush=True)
            (args.out / "results.json").write_text(json.dumps(results, indent=2))  # partial results survive a timeout
    print("\n| layout | GPUs | loss it 1 | final loss | max rel. diff vs 1 GPU | grad norm max rel. diff | tokens/s "
          "| peak alloc GiB (rank 0) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        if "error" in r:
            print(f"| {name} | - | failed | | | | | |")
            continue
        print(f"| {name} | {r['world_size']} | {r['losses'][0]:.4f} | {r['losses'][-1]:.4f} | "
              f"{r['max_rel_diff_vs_single']:.2e} | {r['grad_norm_max_rel_diff']:.2e} | {r['tokens_per_s']:,.0f} | "
              f"{r['max_allocated_gib']:.2f} |")
    (args.out / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
