"""The memory plan next to what a run measured: static bytes (ranks.json, any device) and torch's
peak allocated/reserved bytes per rank (device_memory.json or metrics.jsonl, GPU runs).

    python -m helpers.memory.vs_measured RESULTS.json     # benchmarks/gpu_checks/memory.py output -> markdown table
"""
from __future__ import annotations

import json
import sys
from dataclasses import replace

from helpers.job.layout import Layout
from helpers.job.spec import JobSpec
from helpers.memory.plan import plan_memory
from helpers.memory.static import rank_coordinates, static_memory
from helpers.memory.training import Training

STATIC_KEYS = ["params", "param_bytes", "grad_bytes", "optimizer_state_bytes", "main_param_bytes"]


def layout_and_model(spec: JobSpec):
    """The Layout and model preset a JobSpec describes."""
    return Layout.of(spec), spec.model_preset()


def static_mismatches(spec: JobSpec, ranks: dict) -> list[str]:
    """Every (rank, key) where the plan's static bytes differ from what the live job recorded."""
    lay, model = layout_and_model(spec)
    tr = Training.of(spec)
    out = []
    for rank, live in ranks.items():
        planned = static_memory(model, lay, tr, **rank_coordinates(lay, int(rank))).as_dict()
        for k in STATIC_KEYS:
            if planned[k] != live[k]:
                out.append(f"rank {rank} {k}: planned {planned[k]} live {live[k]}")
    return out


def peak_rows(spec: JobSpec, peaks: dict, training: dict | None = None) -> list[dict]:
    """One row per rank: planned peak allocated bytes vs torch's measured peak. `training`
    overrides what Training.of(spec) assumes (a results file records it for runs whose settings differ
    from today's defaults, e.g. Megatron's local attention and the unfused cross-entropy)."""
    lay, model = layout_and_model(spec)
    plan = plan_memory(model, lay, replace(Training.of(spec), **(training or {})))
    rows = []
    for rank, pk in sorted(peaks.items(), key=lambda x: int(x[0])):
        st = rank_coordinates(lay, int(rank))["stage"]
        sp = next(s for s in plan.stages if s.stage == st)
        meas = pk["mem_max_allocated_bytes"]
        rows.append(dict(rank=int(rank), stage=st, planned=sp.allocated_bytes, allocated=meas,
                         reserved=pk["mem_max_reserved_bytes"], error=sp.allocated_bytes / meas - 1,
                         planned_reserved=int(sp.allocated_bytes * (1 + plan.training.allocator_overhead))))
    return rows


def table(results: dict) -> str:
    lines = ["| layout | model | seq x mb (M) | precision | attention | rank (stage) | planned GiB "
             "| peak allocated GiB | error | peak reserved GiB | static exact |", "|---" * 11 + "|"]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | failed | | | | | | | | | |")
            continue
        spec = JobSpec.from_dict(r["spec"])
        lay, model = layout_and_model(spec)
        exact = "yes" if not static_mismatches(spec, r["ranks"]) else "NO"
        m = spec.global_batch_size // (spec.micro_batch * spec.dp)
        for row in peak_rows(spec, r["peaks"], r.get("training")):
            lines.append(f"| {name} | L{model.num_layers} h{model.hidden_size}{' MoE' if model.is_moe else ''} | "
                         f"{spec.seq_len} x {spec.micro_batch} ({m}) | {spec.precision} | "
                         f"{(r.get('training') or {}).get('attention', spec.attention)} | "
                         f"{row['rank']} ({row['stage']}) | "
                         f"{row['planned'] / 2**30:.2f} | {row['allocated'] / 2**30:.2f} | {row['error']:+.1%} | "
                         f"{row['reserved'] / 2**30:.2f} | {exact} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(json.loads(open(sys.argv[1]).read())))
