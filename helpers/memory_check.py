"""The memory plan next to what a run measured: static bytes (ranks.json, any device) and torch's
peak allocated/reserved bytes per rank (device_memory.json or metrics.jsonl, GPU runs).

    python -m helpers.memory_check RESULTS.json     # benchmarks/memory_gpu.py output -> markdown table
"""
from __future__ import annotations

import json
import sys

from helpers.memory import StaticMemory, Training, plan_memory, rank_coordinates, static_memory
from helpers.spec import JobSpec

STATIC_KEYS = ["params", "param_bytes", "grad_bytes", "optimizer_state_bytes", "main_param_bytes"]


def _layout_and_model(spec: JobSpec):
    from helpers.launch import layout_of, model_of  # the runner's own conversion
    return layout_of(spec), model_of(spec)


def training_of(spec: JobSpec) -> Training:
    precision = spec.precision if spec.precision != "auto" else ("fp32" if spec.device == "cpu" else "bf16")
    return Training(precision=precision, dist_opt=spec.dist_opt)


def static_mismatches(spec: JobSpec, ranks: dict) -> list[str]:
    """Every (rank, key) where the plan's static bytes differ from what the live job recorded."""
    lay, model = _layout_and_model(spec)
    tr = training_of(spec)
    out = []
    for rank, live in ranks.items():
        planned = static_memory(model, lay, tr, **rank_coordinates(lay, int(rank))).as_dict()
        for k in STATIC_KEYS:
            if planned[k] != live[k]:
                out.append(f"rank {rank} {k}: planned {planned[k]} live {live[k]}")
    return out


def peak_rows(spec: JobSpec, peaks: dict) -> list[dict]:
    """One row per rank: planned peak allocated bytes vs torch's measured peak."""
    lay, model = _layout_and_model(spec)
    plan = plan_memory(model, lay, training_of(spec))
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
    lines = ["| layout | model | seq x mb (M) | precision | rank (stage) | planned GiB | peak allocated GiB "
             "| error | peak reserved GiB | static exact |", "|---" * 10 + "|"]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | failed | | | | | | | | |")
            continue
        spec = JobSpec.from_dict(r["spec"])
        lay, model = _layout_and_model(spec)
        exact = "yes" if not static_mismatches(spec, r["ranks"]) else "NO"
        m = spec.global_batch_size // (spec.micro_batch * spec.dp)
        for row in peak_rows(spec, r["peaks"]):
            lines.append(f"| {name} | L{model.num_layers} h{model.hidden_size}{' MoE' if model.is_moe else ''} | "
                         f"{spec.seq_len} x {spec.micro_batch} ({m}) | {spec.precision} | {row['rank']} ({row['stage']}) | "
                         f"{row['planned'] / 2**30:.2f} | {row['allocated'] / 2**30:.2f} | {row['error']:+.1%} | "
                         f"{row['reserved'] / 2**30:.2f} | {exact} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(json.loads(open(sys.argv[1]).read())))


class MemoryPlanWarning(UserWarning):
    """The plan says the job will not fit in device memory."""


def warn_if_over_device(spec: JobSpec, device_bytes: int | None = None) -> str | None:
    """Before a GPU launch: warn (and return the message) when the plan's reserved peak exceeds the
    device's memory. `device_bytes` defaults to GPU 0's total memory."""
    import warnings
    if device_bytes is None:
        import torch
        device_bytes = torch.cuda.get_device_properties(0).total_memory
    lay, model = _layout_and_model(spec)
    plan = plan_memory(model, lay, training_of(spec))
    if plan.fits(device_bytes):
        return None
    worst = max(plan.stages, key=lambda s: s.allocated_bytes)
    msg = (f"memory plan: {plan.reserved_bytes / 2**30:.1f} GiB per GPU on the {worst.label} pipeline stage "
           f"(peak allocated {worst.allocated_bytes / 2**30:.1f} GiB + allocator overhead) exceeds the device's "
           f"{device_bytes / 2**30:.1f} GiB; largest terms: "
           + ", ".join(f"{k} {v / 2**30:.1f} GiB" for k, v in sorted(worst.terms.items(), key=lambda x: -x[1])[:3])
           + ". Try a smaller micro batch or sequence, more TP/PP, sequence parallel, or the distributed optimizer.")
    warnings.warn(msg, MemoryPlanWarning, stacklevel=3)
    return msg
