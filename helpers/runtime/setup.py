"""Process groups for one rank: torch.distributed (gloo on CPU, NCCL on GPU) and Megatron-Core's
parallel_state, as Megatron's own training loop initialises them, then the seeds."""
from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

COLLECTIVE_TIMEOUT_MIN = 5  # a collective waiting longer than this fails (the runner's timeout is separate)


def process_groups(spec) -> torch.device:
    """torch.distributed + Megatron parallel_state. Returns the torch device of this rank."""
    import megatron.core  # noqa: F401  (import before the compat patches, which target it)
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    on_cpu = spec.device == "cpu"
    if on_cpu:
        from helpers.runtime import cpu_compat
        cpu_compat.activate()
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dist.init_process_group("gloo" if on_cpu else "nccl", timeout=timedelta(minutes=COLLECTIVE_TIMEOUT_MIN))
    ps.initialize_model_parallel(
        tensor_model_parallel_size=spec.tp,
        pipeline_model_parallel_size=spec.pp,
        virtual_pipeline_model_parallel_size=spec.vpp,
        context_parallel_size=spec.cp,
        expert_model_parallel_size=spec.ep,
        expert_tensor_parallel_size=spec.expert_tp,
        distributed_timeout_minutes=COLLECTIVE_TIMEOUT_MIN,
    )
    torch.manual_seed(spec.seed)
    model_parallel_cuda_manual_seed(spec.seed)
    return device
