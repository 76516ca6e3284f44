"""Which GPU runs which low-precision recipe, from its CUDA compute capability.

FP8 tensor cores arrived with Ada (8.9) and Hopper (9.0): `torch._scaled_mm` takes e4m3/e5m2
operands with one fp32 scale per tensor there, and on Hopper also one per row. Blackwell (10.x,
12.x) adds microscaled formats: MXFP8, blocks of 32 values with an E8M0 scale, read by the tensor
cores themselves (on Hopper cuBLAS answers CUBLAS_STATUS_NOT_SUPPORTED; FIELD_NOTES). Earlier
GPUs (Ampere 8.0/8.6 and before) have no FP8 arithmetic; bf16 is their lowest training format.
The kit trains FP8 with the tensorwise, delayed and rowwise recipes (helpers/precision/fp8_matmul.py;
delayed is tensorwise GEMMs with the scale taken from earlier steps);
MXFP8 appears in the lesson as an emulation (helpers/precision/recipes.py)."""
from __future__ import annotations

from dataclasses import dataclass

FP8_MIN_CAPABILITY = (8, 9)


@dataclass(frozen=True)
class Support:
    capability: tuple[int, int] | None  # None: no GPU
    generation: str
    fp8_recipes: tuple[str, ...]  # the kit's FP8 GEMM recipes this device runs
    mxfp8: bool  # microscaled FP8 in hardware

    def message(self) -> str:
        where = "no GPU" if self.capability is None else \
            f"compute capability {self.capability[0]}.{self.capability[1]} ({self.generation})"
        if self.capability is None:
            return (f"{where}: FP8 GEMMs need a GPU of compute capability >= "
                    f"{FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]} (Ada, Hopper, Blackwell); CPU jobs train in fp32")
        if not self.fp8_recipes:
            return (f"{where}: no FP8 tensor cores (they need compute capability >= "
                    f"{FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]}: Ada, Hopper, Blackwell); "
                    "train in bf16 here")
        mx = "MXFP8 in hardware" if self.mxfp8 else "no MXFP8 (Blackwell only; emulated in lesson 17)"
        return f"{where}: FP8 {' and '.join(self.fp8_recipes)} scaling; {mx}"


def support(capability: tuple[int, int] | None) -> Support:
    if capability is None:
        return Support(None, "CPU", (), False)
    cap = tuple(capability)
    if cap >= (10, 0):
        return Support(cap, "Blackwell", ("tensorwise", "rowwise", "delayed"), True)
    if cap >= (9, 0):
        return Support(cap, "Hopper", ("tensorwise", "rowwise", "delayed"), False)
    if cap >= FP8_MIN_CAPABILITY:
        return Support(cap, "Ada", ("tensorwise", "delayed"), False)
    generation = "Ampere" if cap >= (8, 0) else "Turing" if cap >= (7, 5) else "Volta or older"
    return Support(cap, generation, (), False)


def this_device() -> Support:
    """The running process's GPU 0 (or no GPU)."""
    import torch
    try:
        if torch.cuda.is_available():
            return support(torch.cuda.get_device_capability(0))
    except RuntimeError:  # a CUDA build of torch on a host without a driver
        pass
    return support(None)
