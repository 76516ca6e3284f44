"""What this machine offers a job, as plain data: how many GPUs, which FP8 recipes GPU 0 runs,
whether Transformer Engine is installed, how much memory a GPU has. The launcher probes it once per
job (helpers/launch/environment.py); tests make one up, so every rule can be checked on a CPU
machine for any GPU."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Environment:
    cuda_devices: int = 0  # GPUs this process sees
    gpu_name: str | None = None  # GPU 0's name
    fp8_recipes: tuple[str, ...] = ()  # the kit's FP8 recipes GPU 0 runs (helpers/precision/hardware.py)
    fp8_note: str = "no GPU"  # GPU 0 in words, and what it runs in FP8 (hardware.Support.message())
    te_installed: bool = False  # `transformer_engine` can be imported
    device_memory_bytes: int | None = None  # GPU 0's memory (the memory plan's launch warning)
    tensorboard_installed: bool = False  # `tensorboard` can be imported (JobSpec.tensorboard)


CPU_ONLY = Environment()


def tensorboard_installed() -> bool:
    """Whether the `tensorboard` package (torch.utils.tensorboard's writer needs it) can be found."""
    import importlib.util
    return importlib.util.find_spec("tensorboard") is not None


def te_installed() -> bool:
    """Whether `transformer_engine` can be found (not imported: its import needs a GPU driver)."""
    import importlib.util
    return importlib.util.find_spec("transformer_engine") is not None
