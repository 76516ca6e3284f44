"""Worker-side writing of the run directory (see DESIGN.md): per-rank logs, metrics (rank 0),
groups.json, ranks.json, error files. Notebook-side reading lives in helpers.results."""
from __future__ import annotations

import json
import os
import socket
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist


def redirect_output(run_dir: Path, rank: int) -> None:
    """Send this process's stdout/stderr (Python and C++) to logs/rank<N>.log."""
    log = open(Path(run_dir) / "logs" / f"rank{rank}.log", "a", buffering=1)
    sys.stdout.flush(), sys.stderr.flush()
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log


def write_json(path: Path, obj) -> None:
    """Atomic: readers never see a half-written file."""
    tmp = Path(str(path) + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    tmp.replace(path)


def write_error(run_dir: Path, rank: int, exc: BaseException) -> None:
    write_json(Path(run_dir) / "logs" / f"rank{rank}.error.json", {
        "rank": rank, "type": type(exc).__name__, "message": str(exc),
        "traceback": traceback.format_exc(),
    })


class Metrics:
    """Rank 0 appends one JSON line per iteration, flushed so the runner can follow it."""

    def __init__(self, run_dir: Path, enabled: bool):
        self._f = open(Path(run_dir) / "metrics.jsonl", "a", buffering=1) if enabled else None

    def write(self, record: dict) -> None:
        if self._f:
            self._f.write(json.dumps(record) + "\n")


def gather_to_rank0(obj):
    """All ranks' `obj` as a list on rank 0 (None elsewhere)."""
    out = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


def describe_process_groups() -> dict:
    """The groups this rank actually got from parallel_state, as lists of global ranks."""
    from megatron.core import parallel_state as ps

    getters = {
        "tp": ps.get_tensor_model_parallel_group,
        "cp": ps.get_context_parallel_group,
        "pp": ps.get_pipeline_model_parallel_group,
        "dp": lambda: ps.get_data_parallel_group(with_context_parallel=False),
        "dp_cp": lambda: ps.get_data_parallel_group(with_context_parallel=True),
        "mp": ps.get_model_parallel_group,
        "ep": ps.get_expert_model_parallel_group,
        "etp": ps.get_expert_tensor_parallel_group,
        "edp": ps.get_expert_data_parallel_group,
        "embedding": ps.get_embedding_group,
    }
    groups = {}
    for axis, get in getters.items():
        try:
            group = get()
        except (AssertionError, RuntimeError):
            continue  # e.g. no embedding group on a middle pipeline stage
        groups[axis] = dist.get_process_group_ranks(group) if group is not None else None
    return groups


def write_groups(run_dir: Path) -> None:
    """groups.json: {rank: {axis: [ranks]}} gathered from every rank (collective: all ranks call)."""
    groups = gather_to_rank0(describe_process_groups())
    if dist.get_rank() == 0:
        write_json(Path(run_dir) / "groups.json", {str(r): g for r, g in enumerate(groups)})


def host_facts(device: torch.device) -> dict:
    facts = {"host": socket.gethostname(), "pid": os.getpid(), "device": str(device)}
    if device.type == "cuda":
        facts["device_name"] = torch.cuda.get_device_name(device)
    return facts


class Heartbeat:
    """Each rank records how far it got (logs/rank<N>.heartbeat.json). When a job hangs, the
    ranks that are furthest behind are the stalled ones; the runner names them."""

    def __init__(self, run_dir: Path, rank: int):
        self._path = Path(run_dir) / "logs" / f"rank{rank}.heartbeat.json"
        self._step = 0

    def __call__(self, phase: str, iteration: int = 0) -> None:
        import time
        self._step += 1
        write_json(self._path, {"step": self._step, "phase": phase, "iteration": iteration,
                                "time": time.time()})
