"""GPU throughput: the kit's job against a bare Megatron-Core loop of the same model, on one GPU.

For each model size and attention choice it runs the kit's worker (helpers.launch.run, NCCL, bf16)
and the bare loop (benchmarks/speed/bare_mcore_loop.py: same model, wrapping, optimizer, attention and
fusions, none of the kit's runner), then prints tokens/s, step time, MFU and peak allocated memory
with kit/bare ratios, and writes everything to OUT/results.json. MFU counts FLOPs as Megatron's
papers do (helpers/job/flops.py; the formula is printed) over the device's dense bf16 peak.

    python -m benchmarks.speed.throughput --out DIR [--sizes gpt-125m,gpt-1.4b,gpt-7b-l6,moe]
        [--attention sdpa,megatron_local] [--iters 8] [--no-extras]

The kit's job runs with the job's default settings (`--instruments auto`: off on a GPU); `--instruments
on` asks what the whole worker costs with every instrument (comm log, timeline, router log).
`--repeats N` runs the kit and the bare loop N times each, alternating (kit, bare, kit, bare, ...), so
that a host or clock that drifts during the call moves both; the table gives the medians over the
repeats and the median of the N paired kit/bare ratios (OUT/results.json keeps every run).
`--kit-extras SIZES`: the kit's job of those sizes again with instruments="on" and once under
torch.profiler (torch_profile: its last two steps, OUT/profile_kit_SIZE.txt).
The last two steps of the bare 1.4B run with SDPA are profiled with torch.profiler
(OUT/profile_after.txt). Extras (1.4B): the kit with every instrument (instruments="on"), the bare
loop without the GPU fusions (compiled rotary, bias/dropout/cross-entropy fusions, fused Adam), and
with Megatron's local attention and no fusions (profiled: OUT/profile_before.txt).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from helpers import launch
from helpers.job.flops import FORMULA, flops_per_token, mfu
from helpers.job.models import preset
from helpers.job.paths import REPO_ROOT

VOCAB = 50304
SIZES = {  # name -> (kit preset, model fields, seq_len, micro batch, global batch)
    "gpt-125m": ("tiny-gpt", dict(num_layers=12, hidden_size=768, num_attention_heads=12, ffn_hidden_size=3072),
                 2048, 4, 32),
    "gpt-1.4b": ("tiny-gpt", dict(num_layers=24, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=8192),
                 2048, 4, 32),
    # GPT-3 6.7B's widths (hidden 4096, 32 heads, FFN 16384) with 6 of its 32 layers
    "gpt-7b-l6": ("tiny-gpt", dict(num_layers=6, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=16384),
                  2048, 2, 16),
    "moe": ("tiny-moe", dict(num_layers=8, hidden_size=1024, num_attention_heads=16, num_query_groups=4,
                             ffn_hidden_size=4096, moe_ffn_hidden_size=2048, num_experts=8, moe_router_topk=2),
            2048, 4, 32),
}
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12}  # dense, vendor datasheets
WARMUP = 3  # iterations left out of the medians (compile, allocator growth)


def model_of(size: str):
    name, fields, seq, _, _ = SIZES[size]
    return preset(name).with_(vocab_size=VOCAB, max_seq_len=seq, **fields)


def run_kit(size: str, attention: str, iters: int, out: Path, **job) -> dict:
    """The kit's job of this size; `job`: JobSpec fields on top (instruments, torch_profile)."""
    name, fields, seq, mb, gbs = SIZES[size]
    t0 = time.time()
    run = launch.run(**{**dict(model=name, model_overrides=dict(fields, vocab_size=VOCAB, max_seq_len=seq),
                               seq_len=seq, micro_batch=mb, global_batch=gbs, iters=iters, lr=3e-4, device="cuda",
                               attention=attention, seed_checkpoint=False, out=str(out / "runs"), progress=False,
                               timeout_s=500, env={"NCCL_NVLS_ENABLE": "0"}), **job})
    steps = [m["step_time_s"] for m in run.metrics]
    step = statistics.median(steps[WARMUP:] or steps)
    peaks_file = run.path / "device_memory.json"
    peaks = json.loads(peaks_file.read_text()) if peaks_file.exists() else {"0": {
        k: max(m.get(k, 0) for m in run.metrics) for k in ("mem_max_allocated_bytes", "mem_max_reserved_bytes")}}
    first = run.metrics[0]
    return {"step_time_s": step, "tokens_per_s": gbs * seq / step, "step_times_s": steps, "losses": run.losses,
            "launch_to_first_iteration_s": first["time"] - first["step_time_s"] - t0,
            "params": run.ranks[0]["params"], "max_allocated_bytes": peaks["0"]["mem_max_allocated_bytes"],
            "max_reserved_bytes": peaks["0"]["mem_max_reserved_bytes"], "spec": run.spec.to_dict(), "peaks": peaks,
            "ranks": {str(k): v for k, v in run.ranks.items()}, "device": run.ranks[0].get("device_name")}


def run_bare(size: str, attention: str, iters: int, fusions: bool = True, profile: Path | None = None) -> dict:
    _, _, seq, mb, gbs = SIZES[size]
    cfg = dict(model=model_of(size).to_dict(), seq_len=seq, micro_batch=mb, global_batch=gbs, iters=iters,
               attention=attention, fusions=fusions, fused_adam=fusions, profile=str(profile) if profile else None)
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", PYTHONUNBUFFERED="1")
    p = subprocess.run([sys.executable, "-m", "benchmarks.speed.bare_mcore_loop", json.dumps(cfg)],
                       capture_output=True, text=True, env=env, timeout=500, cwd=REPO_ROOT)
    line = next((x for x in p.stdout.splitlines() if x.startswith("BARE_RESULT ")), None)
    if line is None:
        raise RuntimeError(f"bare loop failed (rc {p.returncode}): {(p.stdout + p.stderr)[-3000:]}")
    return dict(json.loads(line.removeprefix("BARE_RESULT ")), fusions=fusions)


def attempt(results: dict, key: str, fn, *args, **kwargs) -> None:
    t0 = time.time()
    try:
        results[key] = dict(fn(*args, **kwargs), wall_s=time.time() - t0)
        r = results[key]
        print(f"{key}: {r['tokens_per_s']:,.0f} tokens/s, step {r['step_time_s']:.3f} s, "
              f"peak {r['max_allocated_bytes'] / 2**30:.1f} GiB ({time.time() - t0:.0f} s)", flush=True)
    except Exception as e:  # keep going: one failure should not hide the other measurements
        results[key] = {"error": str(e)[-3000:]}
        print(f"{key}: FAILED {str(e)[-1500:]}", flush=True)


def paired(results: dict, key: str, repeats: int) -> dict:
    """The medians over the repeats `key#1..N` of one loop (an error if any failed)."""
    runs = [results.get(f"{key}#{r + 1}", {}) for r in range(repeats)]
    if any("error" in run or not run for run in runs):
        return {"error": "a repeat failed: see " + ", ".join(f"{key}#{r + 1}" for r in range(repeats))}
    step = statistics.median(run["step_time_s"] for run in runs)
    return {"step_time_s": step, "tokens_per_s": statistics.median(run["tokens_per_s"] for run in runs),
            "max_allocated_bytes": max(run["max_allocated_bytes"] for run in runs), "repeats": repeats}


def paired_ratio(results: dict, size_attention: str, repeats: int) -> float | None:
    """The median of the repeats' kit/bare ratios, each kit run with the bare run right after it."""
    ratios = [results[f"kit/{size_attention}#{r + 1}"]["tokens_per_s"] /
              results[f"bare/{size_attention}#{r + 1}"]["tokens_per_s"] for r in range(repeats)
              if "tokens_per_s" in results.get(f"kit/{size_attention}#{r + 1}", {})
              and "tokens_per_s" in results.get(f"bare/{size_attention}#{r + 1}", {})]
    return statistics.median(ratios) if ratios else None


def table(results: dict, peak: float) -> str:
    lines = ["| model | attention | kit tokens/s | bare tokens/s | kit/bare | kit step s | bare step s | kit MFU "
             "| bare MFU | kit peak GiB | bare peak GiB |", "|---" * 11 + "|"]
    for key, r in results.items():
        if not key.startswith("kit/") or "#" in key:
            continue
        _, size, attention = key.split("/")
        b = results.get(f"bare/{size}/{attention}", {})
        if "error" in r or "error" in b or not b:
            lines.append(f"| {size} | {attention} | {'failed' if 'error' in r else ''} | "
                         f"{'failed' if 'error' in b else ''} | | | | | | | |")
            continue
        lines.append(f"| {size} | {attention} | {r['tokens_per_s']:,.0f} | {b['tokens_per_s']:,.0f} | "
                     f"{r.get('paired_ratio') or r['tokens_per_s'] / b['tokens_per_s']:.3f} | {r['step_time_s']:.3f} | {b['step_time_s']:.3f} | "
                     f"{mfu(r['tokens_per_s'], model_of(size), SIZES[size][2], peak):.1%} | "
                     f"{mfu(b['tokens_per_s'], model_of(size), SIZES[size][2], peak):.1%} | "
                     f"{r['max_allocated_bytes'] / 2**30:.1f} | {b['max_allocated_bytes'] / 2**30:.1f} |")
    for key, r in results.items():
        if key.startswith("kit-extra/") and "error" not in r:
            size = key.split("/")[1]
            b = results.get(f"bare/{size}/sdpa", {})
            ratio = f"{r['tokens_per_s'] / b['tokens_per_s']:.3f}" if "tokens_per_s" in b else ""
            lines.append(f"| {size} | {key.split('/', 2)[2]} (kit only) | {r['tokens_per_s']:,.0f} | | {ratio} | "
                         f"{r['step_time_s']:.3f} | | "
                         f"{mfu(r['tokens_per_s'], model_of(size), SIZES[size][2], peak):.1%} | | "
                         f"{r['max_allocated_bytes'] / 2**30:.1f} | |")
        if key.startswith("bare-extra/") and "error" not in r:
            size = key.split("/")[1]
            lines.append(f"| {size} | {key.split('/', 2)[2]} (bare only) | | {r['tokens_per_s']:,.0f} | | | "
                         f"{r['step_time_s']:.3f} | | "
                         f"{mfu(r['tokens_per_s'], model_of(size), SIZES[size][2], peak):.1%} | | "
                         f"{r['max_allocated_bytes'] / 2**30:.1f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument("--attention", default="sdpa,megatron_local")
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--no-extras", action="store_true")
    ap.add_argument("--instruments", default="auto", choices=("auto", "on", "off"),
                    help="the kit job's JobSpec.instruments (auto: the default, off on a GPU)")
    ap.add_argument("--repeats", type=int, default=1, help="kit and bare runs per size, alternating")
    ap.add_argument("--kit-extras", default="", help="sizes whose kit job also runs with instruments='on' and "
                    "under torch.profiler (OUT/profile_kit_SIZE.txt)")
    ap.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak; default from the GPU name")
    args = ap.parse_args()
    import torch
    gpu = torch.cuda.get_device_name(0)
    peak = args.peak_tflops * 1e12 if args.peak_tflops else next(
        (v for k, v in PEAK_BF16.items() if k in gpu), 989e12)
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}

    # the command as a reader repeats it: the module, its arguments, the output folder as OUT
    command = " ".join(["python -m benchmarks.speed.throughput"] +
                       ["OUT" if a == str(args.out) else a for a in sys.argv[1:]])

    def save():
        text = json.dumps({"gpu": gpu, "peak_flops": peak, "formula": FORMULA, "command": command,
                           "torch": torch.__version__, "results": results}, indent=1)
        (args.out / "results.json").write_text(text.replace(str(args.out), "OUT"))  # the specs' run folders too

    for size in args.sizes.split(","):
        for attention in args.attention.split(","):
            for r in range(args.repeats):
                tag = f"#{r + 1}" if args.repeats > 1 else ""
                attempt(results, f"kit/{size}/{attention}{tag}", run_kit, size, attention, args.iters, args.out,
                        instruments=args.instruments)
                profile = (args.out / "profile_after.txt" if size == "gpt-1.4b" and attention == "sdpa" and r == 0
                           else None)
                attempt(results, f"bare/{size}/{attention}{tag}", run_bare, size, attention, args.iters,
                        profile=profile)
                save()
            if args.repeats > 1:
                results[f"kit/{size}/{attention}"] = paired(results, f"kit/{size}/{attention}", args.repeats)
                results[f"bare/{size}/{attention}"] = paired(results, f"bare/{size}/{attention}", args.repeats)
                results[f"kit/{size}/{attention}"]["paired_ratio"] = paired_ratio(
                    results, f"{size}/{attention}", args.repeats)
                save()
        if size in args.kit_extras.split(","):
            attempt(results, f"kit-extra/{size}/sdpa, instruments=on", run_kit, size, "sdpa", args.iters,
                    args.out, instruments="on")
            attempt(results, f"kit-extra/{size}/sdpa, under torch.profiler", run_kit, size, "sdpa", args.iters,
                    args.out, torch_profile=str(args.out / f"profile_kit_{size}.txt"))
            save()
        if size == "gpt-1.4b" and not args.no_extras:
            attempt(results, f"kit-extra/{size}/sdpa, instruments=on", run_kit, size, "sdpa", args.iters,
                    args.out, instruments="on")
            attempt(results, f"bare-extra/{size}/sdpa, no fusions, foreach Adam", run_bare, size, "sdpa",
                    args.iters, fusions=False)
            attempt(results, f"bare-extra/{size}/megatron_local, no fusions, foreach Adam (before)", run_bare,
                    size, "megatron_local", args.iters, fusions=False, profile=args.out / "profile_before.txt")
            save()
    print(f"\nGPU: {gpu}; peak {peak / 1e12:.0f} TFLOP/s dense bf16; MFU = tokens/s x FLOPs/token / peak")
    print(FORMULA)
    for size in args.sizes.split(","):
        print(f"  {size}: {flops_per_token(model_of(size), SIZES[size][2]) / 1e9:.2f} GFLOP/token, "
              f"seq {SIZES[size][2]}, micro batch {SIZES[size][3]}, global batch {SIZES[size][4]}")
    print()
    print(table(results, peak))
    save()


if __name__ == "__main__":
    main()
