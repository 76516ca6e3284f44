"""Activation recompute as a job option, on one GPU: the same job (a 1.4B GPT, bf16, sequence 2048,
micro batch 4, global batch 16) without recompute, with full recompute (uniform, one layer per unit)
and with selective recompute (core attention), the losses per iteration side by side and each run's
measured peak (torch's max allocated / reserved, device_memory.json) against the memory planner's.

    python -m benchmarks.gpu_checks.recompute --out OUT [--iters 6]
    python -m benchmarks.gpu_checks.recompute --write-page OUT/results.json   # docs/results/recompute.md

Recompute repeats the forward of the recomputed unit during the backward with the same inputs and
kernels, so the losses should equal the run without it (the check: within README's bf16 bound 1e-2
relative; observed differences are reported) while the activations kept shrink."""
from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

from helpers import launch
from helpers.job.layout import Layout
from helpers.memory.plan import plan_memory

GIB = 2 ** 30
BF16_BOUND = 1e-2
JOB = dict(model="tiny-gpt", model_overrides=dict(num_layers=24, hidden_size=2048, num_attention_heads=16,
                                                    ffn_hidden_size=8192, vocab_size=50304, max_seq_len=2048),
           seq_len=2048, micro_batch=4, global_batch=16, lr=1e-4, device="cuda", precision="bf16", progress=False,
           seed_checkpoint=False, timeout_s=300, env={"NCCL_NVLS_ENABLE": "0"})
CASES = {"none": {}, "full": dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1),
         "selective": dict(recompute_granularity="selective")}
PAGE = Path(__file__).resolve().parents[2] / "docs" / "results" / "recompute.md"


def planned_gib(spec) -> tuple[float, float]:
    """The memory planner's peak allocated and reserved GiB for the job (helpers/memory/plan.py)."""
    from helpers.memory.training import Training
    plan = plan_memory(spec.model_preset(), Layout.of(spec), Training.of(spec))
    return plan.peak_bytes / GIB, plan.reserved_bytes / GIB


def measure(out: Path, iters: int) -> dict:
    import torch

    results = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
               "job": JOB, "iters": iters, "runs": {}}
    for name, extra in CASES.items():
        try:
            run = launch.run(**JOB, **extra, iters=iters, out=str(out / "runs"), name=f"recompute-{name}")
        except Exception as e:  # one case failing (e.g. out of memory) must not lose the others
            results["runs"][name] = {"error": str(e)[-2000:], **extra}
            continue
        rank0 = json.loads((run.path / "device_memory.json").read_text())["0"]
        planned, planned_reserved = planned_gib(run.spec)
        results["runs"][name] = {**extra, "losses": run.losses, "run": str(run.path),
                                 "peak_allocated_gib": rank0["mem_max_allocated_bytes"] / GIB,
                                 "peak_reserved_gib": rank0["mem_max_reserved_bytes"] / GIB,
                                 "planned_gib": planned, "planned_reserved_gib": planned_reserved,
                                 "step_s": [m.get("step_time_s") for m in run.metrics]}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    return results


def page(results: dict, source: str) -> str:
    runs = results["runs"]
    base = runs.get("none", {}).get("losses")
    lines = ["# Activation recompute on one GPU", "",
             f"Measured {results['date']} on one {results['gpu']} with `python -m benchmarks.gpu_checks.recompute "
             f"--out OUT --iters {results['iters']}` (raw: `{source}`). The job: a 1.4B GPT (24 layers, hidden 2048, "
             "FFN 8192, vocabulary 50304), bf16, sequence 2048, micro batch 4, global batch 16, synthetic data, "
             "the kit's local backend with SDPA attention.", "",
             "| recompute | peak allocated GiB (planned) | peak reserved GiB (planned) | median step s | "
             "largest loss difference vs none |", "|---|---|---|---|---|"]
    for name, r in runs.items():
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error'].splitlines()[-1][:120]} | | | |")
            continue
        diff = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], base)) if base else float("nan")
        steps = sorted(t for t in r["step_s"][2:] if t) or [float("nan")]
        lines.append(f"| {name} | {r['peak_allocated_gib']:.1f} ({r['planned_gib']:.1f}) | "
                     f"{r['peak_reserved_gib']:.1f} ({r['planned_reserved_gib']:.1f}) | {steps[len(steps) // 2]:.3f} | "
                     f"{diff:.1e} |")
    lines += ["", f"Losses per iteration (the bound for equal losses in bf16: {BF16_BOUND:g} relative):", "",
              "| iteration | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
    for i in range(results["iters"]):
        lines.append(f"| {i + 1} | " + " | ".join(f"{r['losses'][i]:.5f}" if "losses" in r else "-"
                                                  for r in runs.values()) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--write-page", type=Path, help="render docs/results/recompute.md from a results.json")
    args = ap.parse_args(argv)
    if args.write_page:
        results = json.loads(args.write_page.read_text())
        PAGE.write_text(page(results, str(args.write_page)))
        print(PAGE.read_text())
        return
    args.out.mkdir(parents=True, exist_ok=True)
    results = measure(args.out, args.iters)
    print(page(results, str(args.out / "results.json")))


if __name__ == "__main__":
    main()
