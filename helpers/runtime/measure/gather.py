"""Collectives that bring every rank's facts to rank 0, which writes them into the run directory:
the process groups each rank got (groups.json) and host facts (ranks.json)."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import torch
import torch.distributed as dist

from helpers.rundir import names
from helpers.rundir.writer import write_json


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
        write_json(Path(run_dir) / names.GROUPS, {str(r): g for r, g in enumerate(groups)})


def host_facts(device: torch.device) -> dict:
    facts = {"host": socket.gethostname(), "pid": os.getpid(), "device": str(device)}
    if device.type == "cuda":
        facts["device_name"] = torch.cuda.get_device_name(device)
    return facts
