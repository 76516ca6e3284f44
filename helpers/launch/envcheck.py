"""What this machine offers the kit: versions and the tier (CPU/gloo or GPU/NCCL)."""
from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version


def _version(pkg: str) -> str | None:
    try:
        return version(pkg)
    except PackageNotFoundError:
        return None


def report() -> dict:
    from helpers.launch import cuda_device_count

    gpus = cuda_device_count()
    out = {
        "python": platform.python_version(),
        "torch": _version("torch"),
        "megatron-core": _version("megatron-core"),
        "megatron-bridge": _version("megatron-bridge"),
        "transformer-engine": _version("transformer-engine") or _version("transformer_engine"),
        "cpu_cores": os.cpu_count(),
        "gpus": gpus,
        "tier": "GPU (nccl, bf16)" if gpus else "CPU (gloo, fp32)",
    }
    if gpus:
        import torch
        out["gpu_name"] = torch.cuda.get_device_name(0)
    return out
