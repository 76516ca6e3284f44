"""Measured peak memory on GPUs for the memory planner's check (docs/results/memory.md).

Runs the kit's worker (NCCL, bf16 unless a layout says fp32) for a GPT large enough that activations
matter, on 1 and 2 GPUs, and writes each run's spec plus torch's peak allocated/reserved bytes of
every rank to results.json. The plan is computed afterwards (helpers/memory/ needs no GPU):

    python -m benchmarks.gpu_checks.memory --out DIR [--layouts g1,tp2,...]
    python -m helpers.memory.vs_measured DIR/results.json      # plan vs measured table

One-GPU layouts run two at a time (one per GPU) when two GPUs are visible.
"""
import argparse
import json
import threading
import time
from pathlib import Path

from helpers import launch

GPT = dict(num_layers=12, hidden_size=1024, num_attention_heads=16, ffn_hidden_size=4096,
           vocab_size=50304, max_seq_len=4096)
GQA = dict(GPT, num_query_groups=4, normalization="RMSNorm")
MOE = dict(num_layers=8, hidden_size=1024, num_attention_heads=16, num_query_groups=4, ffn_hidden_size=2048,
           vocab_size=50304, num_experts=8, moe_router_topk=2, max_seq_len=4096)
BASE = dict(model="tiny-gpt", model_overrides=GPT, seq_len=2048, micro_batch=2)
LAYOUTS = {  # name -> JobSpec fields (on top of BASE)
    "g1": dict(),
    "g1-s1024-mb4": dict(seq_len=1024, micro_batch=4),
    "g1-gqa-rms": dict(model_overrides=GQA),
    "g1-fp32": dict(precision="fp32", seq_len=1024),
    "g1-m4": dict(global_batch=8),
    "g1-s4096-mb1": dict(seq_len=4096, micro_batch=1, model_overrides=dict(GPT, num_layers=6)),
    # one-GPU layouts for the SDPA attention: longer sequences, Megatron's local
    # attention for comparison, the distributed optimizer at DP=1, a MoE on one GPU
    "g1-local-attention": dict(attention="megatron_local"),
    "g1-local-s1024-mb4": dict(attention="megatron_local", seq_len=1024, micro_batch=4),
    "g1-s8192-mb1": dict(seq_len=8192, micro_batch=1, model_overrides=dict(GPT, num_layers=6, max_seq_len=8192)),
    "g1-s512-mb16": dict(seq_len=512, micro_batch=16),
    "g1-distopt": dict(dist_opt=True),
    "g1-moe": dict(model="tiny-moe", model_overrides=MOE, seq_len=1024, micro_batch=2),
    "tp2": dict(tp=2),
    "tp2-sp": dict(tp=2, sp=True),
    "pp2": dict(pp=2, global_batch=8),
    "pp2-vpp2": dict(pp=2, vpp=2, global_batch=8),
    "pp2-uneven": dict(pp=2, first_stage_layers=4, last_stage_layers=8, global_batch=8),
    "dp2": dict(nproc=2, global_batch=4),
    "dp2-distopt": dict(nproc=2, dist_opt=True, global_batch=4),
    "moe-ep2": dict(model="tiny-moe", model_overrides=MOE, ep=2, nproc=2, seq_len=1024, micro_batch=2),
}


def _one(name, fields, job, results, gpu=None):
    t0 = time.time()
    spec = dict(job, **BASE)
    spec.update(fields)
    if gpu is not None:
        spec["env"] = {"CUDA_VISIBLE_DEVICES": str(gpu)}
    try:
        run = launch.run(**spec)
    except Exception as e:  # keep going: one failing layout should not hide the others
        results[name] = {"error": str(e)[:2000]}
        print(f"{name}: FAILED {str(e)[:800]}", flush=True)
        return
    peaks = json.loads((run.path / "device_memory.json").read_text()) if (run.path / "device_memory.json").exists() \
        else {"0": {k: max(m.get(k, 0) for m in run.metrics)
                    for k in ("mem_max_allocated_bytes", "mem_max_reserved_bytes")}}
    results[name] = {"spec": run.spec.to_dict(), "peaks": peaks, "ranks": {str(k): v for k, v in run.ranks.items()},
                     "device": run.ranks[0].get("device_name"), "wall_s": time.time() - t0,
                     "losses": run.losses}
    print(f"{name}: {time.time() - t0:.0f} s, peaks {[p['mem_max_allocated_bytes'] / 2**30 for p in peaks.values()]}",
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--attention", help="JobSpec.attention of every layout that does not set its own "
                                        "(default: the kit's default, sdpa)")
    args = ap.parse_args()
    job = dict(iters=args.iters, lr=3e-4, device="cuda", out=str(args.out / "runs"), progress=False,
               timeout_s=300, seed_checkpoint=False, **({"attention": args.attention} if args.attention else {}))
    results = {}
    names = args.layouts.split(",")
    single = [n for n in names if n.startswith("g1")]
    gpus = launch.cuda_device_count()
    while single:  # one-GPU layouts side by side, one per GPU
        batch, single = single[:gpus], single[gpus:]
        threads = [threading.Thread(target=_one, args=(n, LAYOUTS[n], job, results, g)) for g, n in enumerate(batch)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
    for n in names:
        if not n.startswith("g1"):
            _one(n, LAYOUTS[n], job, results)
            (args.out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
