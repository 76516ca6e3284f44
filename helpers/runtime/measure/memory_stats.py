"""What this rank holds, read from the live objects: parameters, gradient buffers, optimizer
state. Exact numbers (no estimates) so the memory planner can be checked against them."""
from __future__ import annotations

import torch

from helpers.rundir import names
from helpers.rundir.writer import write_json
from helpers.runtime.measure.gather import gather_to_rank0


def _bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _optimizers(opt):
    return getattr(opt, "chained_optimizers", None) or [opt]


def static_memory(model: list, opt) -> dict:
    params = {id(p): p for chunk in model for p in chunk.parameters()}
    n_params = sum(p.numel() for p in params.values())
    param_bytes = sum(_bytes(p) for p in params.values())
    grad_bytes = 0
    for chunk in model:  # Megatron DDP keeps all grads in contiguous buffers
        for buf in list(chunk.buffers) + list(chunk.expert_parallel_buffers):
            grad_bytes += _bytes(buf.grad_data)
    state_bytes, main_param_bytes = 0, 0
    for o in _optimizers(opt):
        inner = o.optimizer
        for state in inner.state.values():
            state_bytes += sum(_bytes(v) for v in state.values() if torch.is_tensor(v) and v.dim() > 0)
        for group in inner.param_groups:  # fp32 main copies (bf16 training, distributed optimizer)
            main_param_bytes += sum(_bytes(p) for p in group["params"] if id(p) not in params)
    return {
        "params": n_params,
        "param_bytes": param_bytes,
        "grad_bytes": grad_bytes,
        "optimizer_state_bytes": state_bytes,
        "main_param_bytes": main_param_bytes,
    }


def device_memory(device: torch.device) -> dict:
    if device.type != "cuda":
        return {}
    return {
        "mem_allocated_bytes": torch.cuda.memory_allocated(device),
        "mem_max_allocated_bytes": torch.cuda.max_memory_allocated(device),
        "mem_max_reserved_bytes": torch.cuda.max_memory_reserved(device),
    }


def write_device_peaks(run_dir, device: torch.device) -> None:
    """device_memory.json: torch's peak allocated/reserved bytes of every rank (GPU runs only).
    A collective: every rank calls it."""
    if device.type != "cuda":
        return
    peaks = gather_to_rank0(device_memory(device))
    if peaks is not None:
        write_json(run_dir / names.DEVICE_MEMORY, {str(r): p for r, p in enumerate(peaks)})
