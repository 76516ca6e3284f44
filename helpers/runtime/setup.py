"""Process groups for one rank: torch.distributed (gloo on CPU, NCCL on GPU) and Megatron-Core's
parallel_state, as Megatron's own training loop initialises them, then the seeds."""
from __future__ import annotations

import dataclasses
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from helpers.job import megatron_names

# A collective waiting longer than this fails on the waiting ranks with the backend's own error
# (JobSpec.collective_timeout_s overrides; the runner's timeout_s/stall_timeout_s are separate).
DEFAULT_COLLECTIVE_TIMEOUT_S = {"gloo": 300.0, "nccl": 600.0}


def process_groups(spec) -> torch.device:
    """torch.distributed + Megatron parallel_state, as Megatron's example's initialize_distributed
    does (plus the CPU compatibility layer on CPU). Returns the torch device of this rank."""
    import megatron.core  # noqa: F401  (import before the compat patches, which target it)
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    on_cpu = spec.device == "cpu"
    if on_cpu:
        from helpers.runtime.compat import cpu as cpu_compat
        cpu_compat.activate()
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    timeout_s = collective_timeout_s(spec)
    dist.init_process_group("gloo" if on_cpu else "nccl", timeout=timedelta(seconds=timeout_s))
    ps.initialize_model_parallel(**parallel_args(spec, timeout_s))
    torch.manual_seed(spec.seed)
    model_parallel_cuda_manual_seed(spec.seed)
    return device


def collective_timeout_s(spec) -> float:
    return spec.collective_timeout_s or DEFAULT_COLLECTIVE_TIMEOUT_S["gloo" if spec.device == "cpu" else "nccl"]


def parallel_args(spec, timeout_s: float) -> dict:
    """The arguments of Megatron's `parallel_state.initialize_model_parallel` for this job (also
    recorded in the run directory's megatron.json), with the collective timeout `timeout_s` resolved.
    Megatron's groups take it as timedelta(minutes=...), which accepts a fraction."""
    resolved = dataclasses.replace(spec, collective_timeout_s=timeout_s)
    return megatron_names.core_values(resolved, megatron_names.PARALLEL_STATE)
