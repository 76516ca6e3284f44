"""One GEMM's time on a GPU: its FLOPs at the GPU's achieved rate for GEMMs of its size, or its
bytes at the device memory's copy rate, whichever is longer (a roofline per GEMM).

The achieved rate is not the datasheet peak: large GEMMs reach `Rates.gemm_fraction` of it (the
H200's measured fraction, helpers/advisor/gpus.py) and smaller ones less. `SIZE_CLASSES` holds the
fraction of the large-GEMM rate per size class, keyed by a kernel's FLOPs (2 m k n, times the
batch of a batched product), measured on the H200 in eager torch (benchmarks/advisor/gemm_sizes.py,
`gemm_size_classes`: each shape's forward and two backward products, the median of the shapes in
a class that their bytes do not bound, over the median of the largest class). Below about 4
GFLOPs a kernel's time is mostly the host's launch (about 10 microseconds per product), so the
small classes fall steeply; narrow GEMMs that the memory bounds are the roofline's `bytes` side."""
from __future__ import annotations

from dataclasses import dataclass

from helpers.advisor.gpus import GpuProfile, rates

BYTES = 2  # bf16 / fp16 operands and results

# (FLOPs of one kernel at least, fraction of the large-GEMM rate), smallest first; measured on the H200
# (benchmarks/advisor/gemm_sizes_results.json; tests/unit/test_advisor_time.py derives them again)
SIZE_CLASSES = [(0.0, 0.006), (2.5e8, 0.031), (1e9, 0.122), (4e9, 0.461), (1.6e10, 0.857), (6.4e10, 1.001)]


@dataclass(frozen=True)
class Gemm:
    name: str
    m: int  # rows of the input (tokens)
    k: int  # the reduced dimension
    n: int  # columns of the output
    batch: int = 1  # independent products of this shape in one kernel (experts, attention heads, scan chunks)

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.k * self.n * self.batch

    @property
    def bytes(self) -> float:
        return BYTES * (self.m * self.k + self.k * self.n + self.m * self.n) * self.batch

    def backward(self) -> list["Gemm"]:
        """The two products of its backward: input gradient dY.W^T and weight gradient X^T.dY."""
        return [Gemm(self.name + ".dgrad", self.m, self.n, self.k, self.batch),
                Gemm(self.name + ".wgrad", self.k, self.m, self.n, self.batch)]


def size_fraction(flops: float, classes: list[tuple[float, float]] = SIZE_CLASSES) -> float:
    """The fraction of the large rate a kernel of this many FLOPs reaches (its class in `classes`)."""
    out = classes[0][1]
    for least, fraction in classes:
        if flops >= least:
            out = fraction
    return out


def seconds(g: Gemm, gpu: GpuProfile) -> float:
    r = rates(gpu)
    rate = gpu.peak_bf16_tflops * 1e12 * r.gemm_fraction * size_fraction(g.flops)
    return max(g.flops / rate, g.bytes / (r.copy_gb_per_s * 1e9))


def total_seconds(gemms: list[Gemm], gpu: GpuProfile) -> float:
    return sum(seconds(g, gpu) for g in gemms)
