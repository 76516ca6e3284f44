"""The GPUs and links the roofline model knows. A GPU's `gemm_tflops` and `attention_tflops` are
rates *measured* on it at the 1.4B GPT's shapes (bf16); `hbm_gb_per_s` is its device memory's
measured copy bandwidth, `elementwise_gb_per_s` the rate its norm, add and GeLU kernels reach at
those shapes (about half the copy bandwidth: the memory-bound term uses it) (benchmarks/gpu_checks/roofline.py, recorded
in benchmarks/gpu_checks/roofline_results.json and docs/results/roofline.md), not its datasheet
peak, which no kernel reaches. Link bandwidths are the vendors' numbers per GPU and direction."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    name: str
    peak_bf16_tflops: float  # dense, datasheet
    gemm_tflops: float  # measured: bf16 GEMMs forward + backward at the 1.4B GPT's shapes
    attention_tflops: float  # measured: causal SDPA (flash) forward + backward, FLOPs of the full s x s square
    hbm_gb_per_s: float  # measured: a large device-to-device copy, bytes read + written per second
    elementwise_gb_per_s: float  # measured: layer norms, residual adds and GeLU at a layer's shapes, fwd + bwd
    memory_gib: float


@dataclass(frozen=True)
class Link:
    name: str
    gb_per_s: float  # per GPU and direction


GPUS = {
    # measured 2026-12-03, torch 2.11.0+cu130 (benchmarks/gpu_checks/roofline_results.json)
    "H200": Gpu("NVIDIA H200", peak_bf16_tflops=989.0, gemm_tflops=747.3, attention_tflops=599.8,
                hbm_gb_per_s=4248.2, elementwise_gb_per_s=2154.2, memory_gib=141),
}
LINKS = {
    "nvlink4": Link("NVLink 4 (H100/H200, 18 links)", 450.0),
    "pcie5": Link("PCIe 5.0 x16", 64.0),
    "ib-ndr": Link("InfiniBand NDR, 400 Gb/s per GPU", 50.0),
}
