"""What the time models take as a GPU's achieved rates. The kit measures one GPU, the H200
(`H200_MEASURED`, at the 1.4B GPT's shapes in bf16: benchmarks/gpu_checks/roofline.py, recorded in
benchmarks/gpu_checks/roofline_results.json and docs/results/roofline.md), never its datasheet peak,
which no kernel reaches. Every other GPU gets the H200's measured fractions of its datasheet applied
to its own datasheet (an assumption, said in `rates`), unless its profile gives its own fractions
(gpus.py: `gemm_fraction`, `elementwise_fraction`)."""
from __future__ import annotations

from dataclasses import dataclass

from helpers.perf.gpus import PROFILES, GpuProfile


@dataclass(frozen=True)
class Rates:
    gemm_fraction: float  # large GEMMs: achieved / dense peak (gemm.py scales it per size class)
    attention_tflops: float  # fused (flash) attention, forward + backward, FLOPs of the full s x s square per second
    copy_gb_per_s: float  # a large device-to-device copy, bytes read + written per second
    elementwise_gb_per_s: float  # norms, adds, activations, softmax: bytes read + written per second
    measured: bool  # True only for the GPU the rates were measured on


# Measured 2026-12-03 on the kit's H200, torch 2.11.0+cu130: bf16 GEMMs forward + backward at 747.3 TFLOP/s
# of the 989 dense peak; causal SDPA (flash) forward + backward; a device-to-device copy; the layer norms,
# residual adds and GeLU of one layer, forward + backward (about half the copy rate)
H200_MEASURED = Rates(gemm_fraction=747.3 / 989.0, attention_tflops=599.8, copy_gb_per_s=4248.2,
                      elementwise_gb_per_s=2154.2, measured=True)


def rates(gpu: GpuProfile) -> Rates:
    """The H200's measured rates over its datasheet, times this GPU's datasheet (spec-sheet ratios);
    its own fractions where its profile gives them."""
    h200 = PROFILES["h200"]
    gemm_fraction = gpu.gemm_fraction or H200_MEASURED.gemm_fraction
    elementwise_fraction = gpu.elementwise_fraction or H200_MEASURED.elementwise_gb_per_s / h200.hbm_gb_per_s
    return Rates(gemm_fraction=gemm_fraction,
                 attention_tflops=gpu.peak_bf16_tflops * H200_MEASURED.attention_tflops / h200.peak_bf16_tflops,
                 copy_gb_per_s=gpu.hbm_gb_per_s * H200_MEASURED.copy_gb_per_s / h200.hbm_gb_per_s,
                 elementwise_gb_per_s=gpu.hbm_gb_per_s * elementwise_fraction, measured=gpu.name == h200.name)
