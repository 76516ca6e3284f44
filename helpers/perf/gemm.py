"""One GEMM's time on a GPU: its FLOPs at the GPU's achieved rate for GEMMs of its size, or its
bytes at the device memory's copy rate, whichever is longer (a roofline per GEMM).

The achieved rate is not the datasheet peak: large GEMMs reach `Rates.gemm_fraction` of it (the
H200's measured fraction, rates.py) and smaller ones less. `SIZE_CLASSES` holds the
fraction of the large-GEMM rate per size class, keyed by a kernel's FLOPs (2 m k n, times the
batch of a batched product), measured on the H200 in eager torch (benchmarks/advisor/gemm_sizes.py,
`gemm_size_classes`: each shape's forward and two backward products, the median of the shapes in
a class that their bytes do not bound, over the median of the largest class). Below about 4
GFLOPs a kernel's time is mostly the host's launch (about 10 microseconds per product), so the
small classes fall steeply; narrow GEMMs that the memory bounds are the roofline's `bytes` side.

Precision: with FP8 training (Transformer Engine's FP8 GEMMs, or the kit's local FP8 linears) the
transformer layers' linears (`fp8_linear`: QKV, projections, MLP and expert FCs, MLA's and Mamba's
projections) run at the GPU's dense FP8 peak times the same achieved fraction, reading 1-byte
operands and writing 16-bit results. The rest stays 16-bit as Megatron-Core runs it: the router
(a plain matmul), Mamba's chunked scan, the attention core, the output layer. The same fraction is
an assumption (the H200's FP8 GEMMs are not measured here); the quantisation casts are the
advisor's memory-bound term (helpers/advisor/time/elementwise.py). NVFP4 training (precision "fp4",
Transformer Engine's NVFP4 recipe) runs the same linears at the GPU's dense FP4 peak (its datasheet,
helpers/perf/gpus.py) times the same fraction, half-byte operands, an assumption of the same kind."""
from __future__ import annotations

from dataclasses import dataclass

from helpers.perf.gpus import PROFILES, GpuProfile
from helpers.perf.rates import rates

BYTES = 2  # bf16 / fp16 operands and results
MEASURED_PEAK_TFLOPS = PROFILES["h200"].peak_bf16_tflops  # the GPU SIZE_CLASSES were measured on
FP8_BYTES = 1  # an FP8 GEMM's operands (its result stays 16-bit)
FP4_BYTES = 0.5  # an NVFP4 GEMM's operands (the per-16-value scales left out)
LOW_PRECISION_BYTES = {"fp8": FP8_BYTES, "fp4": FP4_BYTES}

# The forward GEMMs (layer_gemms.py) that are Transformer Engine linears, so FP8
# with FP8 training: by name, or by the suffix an MLP's FCs carry (mlp., experts., shared_experts.)
FP8_LINEARS = frozenset({"qkv", "proj", "q", "q_down", "q_up", "kv_down", "kv_up", "in_proj", "out_proj"})
FP8_LINEAR_SUFFIXES = (".fc1", ".fc2")
# Those that stay 16-bit: the router's matmul, Mamba's scan products (ssd.*), the materialised
# attention's products and the output layer (tests/unit/test_advisor_precision.py checks that every
# GEMM the time model builds is in one list or the other)
BF16_GEMMS = frozenset({"router", "scores", "values", "output_layer"})
BF16_PREFIXES = ("ssd.",)

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

    @property
    def forward_name(self) -> str:
        """The name of the forward GEMM this one belongs to (without .dgrad / .wgrad)."""
        for suffix in (".dgrad", ".wgrad"):
            if self.name.endswith(suffix):
                return self.name[:-len(suffix)]
        return self.name

    @property
    def fp8_linear(self) -> bool:
        """Whether FP8 training runs this GEMM (forward or backward) in FP8."""
        name = self.forward_name
        return name in FP8_LINEARS or name.endswith(FP8_LINEAR_SUFFIXES)

    def bytes_in(self, precision: str) -> float:
        """Bytes read and written in `precision`: FP8 reads 1-byte operands (FP4 half a byte) and writes a
        16-bit result."""
        if precision in LOW_PRECISION_BYTES and self.fp8_linear:
            return (LOW_PRECISION_BYTES[precision] * (self.m * self.k + self.k * self.n)
                    + BYTES * self.m * self.n) * self.batch
        return self.bytes

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


def seconds(g: Gemm, gpu: GpuProfile, precision: str = "bf16") -> float:
    """`precision`: the job's ("bf16", "fp8" or "fp4"); only the FP8 linears (Gemm.fp8_linear) take it."""
    r = rates(gpu)
    own = precision if g.fp8_linear else "bf16"
    peak = gpu.peak_tflops(own)
    # the size classes are the H200's (BF16): a kernel falls in the class of the one that takes the H200
    # as long at its peak, since what makes small kernels slow (launch, tail) is time, not FLOPs
    rate = peak * 1e12 * r.gemm_fraction * size_fraction(g.flops * MEASURED_PEAK_TFLOPS / peak)
    return max(g.flops / rate, g.bytes_in(own) / (r.copy_gb_per_s * 1e9))


def total_seconds(gemms: list[Gemm], gpu: GpuProfile, precision: str = "bf16") -> float:
    return sum(seconds(g, gpu, precision) for g in gemms)
