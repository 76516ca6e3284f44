"""What this machine offers the kit, read once per job on the notebook side: the Environment the
rules check against (GPUs, the FP8 recipes GPU 0 runs, Transformer Engine, GPU memory;
helpers/job/rules/environment.py), and the versions and tier a learner sees (`report`)."""
from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version

from helpers.job.rules.environment import Environment, te_installed, tensorboard_installed


def cuda_device_count() -> int:
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # a CUDA build of torch on a host without a driver
        return 0


def probe(device: str = "auto") -> Environment:
    """This machine as the rules see it, for a job on `device` (JobSpec.device). A CPU job needs no
    GPU facts, so torch is not imported for one (that takes a second or two the first time)."""
    from helpers.precision import hardware

    gpus = 0 if device == "cpu" else cuda_device_count()
    if not gpus:
        return Environment(te_installed=te_installed(), fp8_note=hardware.support(None).message(),
                           tensorboard_installed=tensorboard_installed())
    import torch
    support = hardware.this_device()
    return Environment(cuda_devices=gpus, gpu_name=torch.cuda.get_device_name(0), fp8_recipes=support.fp8_recipes,
                       fp8_note=support.message(), te_installed=te_installed(),
                       device_memory_bytes=torch.cuda.get_device_properties(0).total_memory,
                       tensorboard_installed=tensorboard_installed())


def _version(pkg: str) -> str | None:
    try:
        return version(pkg)
    except PackageNotFoundError:
        return None


def versions() -> dict:
    """Python and the packages a run records (manifest.json)."""
    import sys
    return {"python": sys.version.split()[0],
            **{pkg: _version(pkg) for pkg in ("torch", "megatron-core", "megatron-bridge", "transformer-engine")}}


def report() -> dict:
    """Versions, cores and the tier this machine runs: CPU (gloo, fp32) or GPU (NCCL, bf16)."""
    gpus = cuda_device_count()
    out = {"python": platform.python_version(), **{k: v for k, v in versions().items() if k != "python"},
           "cpu_cores": os.cpu_count(), "gpus": gpus, "tier": "GPU (nccl, bf16)" if gpus else "CPU (gloo, fp32)"}
    if gpus:
        import torch
        out["gpu_name"] = torch.cuda.get_device_name(0)
    return out
