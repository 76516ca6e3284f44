"""The GPU and interconnect profiles the advisor predicts for: each one's datasheet peak, device
memory, and the two links a collective can take (NVLink or PCIe inside a node, the network between
nodes), with the source of every number as a sentence.

A profile holds datasheet numbers only. What a GPU *achieves* comes from the H200, the one GPU
this kit measures (helpers/roofline/hardware.py): its measured GEMM, attention, copy and
elementwise rates divided by its datasheet numbers give fractions that the time model applies to
every profile (spec-sheet ratios: an assumption for the others, said in `rates`). A user's own GPU
is a JSON file with the fields of `GpuProfile` (`load`)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from helpers.roofline.hardware import GPUS as MEASURED

H200_DATASHEET_HBM_GB_PER_S = 4800.0  # NVIDIA H200 SXM datasheet: 4.8 TB/s HBM3e


@dataclass(frozen=True)
class GpuProfile:
    name: str
    peak_bf16_tflops: float  # dense (no sparsity), vendor datasheet
    memory_gib: float  # device memory a program can allocate from
    hbm_gb_per_s: float  # device memory bandwidth, vendor datasheet
    intra_node_gb_per_s: float  # NVLink (or PCIe) per GPU and direction, vendor datasheet
    inter_node_gb_per_s: float  # network per GPU and direction (the node's NICs shared by its GPUs)
    source: str  # where the numbers come from, as a sentence
    # What this GPU achieves as a fraction of its datasheet, where known for it (else the H200's measured
    # fractions): large GEMMs / peak, and memory-bound kernels / HBM bandwidth
    gemm_fraction: float | None = None
    elementwise_fraction: float | None = None

    def with_(self, **changes) -> "GpuProfile":
        return GpuProfile(**{**asdict(self), **changes})

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Rates:
    """What the time model takes as this GPU's achieved rates: the H200's measured fraction of its
    datasheet applied to this GPU's datasheet (the H200's own measurements for the H200)."""
    gemm_fraction: float  # large GEMMs: achieved / peak (helpers/advisor/time/gemm.py scales it per size class)
    attention_tflops: float  # fused (flash) attention, FLOPs of the full s x s square per second
    copy_gb_per_s: float  # a large device-to-device copy, bytes read + written per second
    elementwise_gb_per_s: float  # norms, adds, activations, softmax: bytes read + written per second
    measured: bool  # True only for the GPU the rates were measured on


def rates(gpu: GpuProfile) -> Rates:
    h200 = MEASURED["H200"]
    gemm_fraction = gpu.gemm_fraction or h200.gemm_tflops / h200.peak_bf16_tflops
    elementwise_fraction = gpu.elementwise_fraction or h200.elementwise_gb_per_s / H200_DATASHEET_HBM_GB_PER_S
    measured = gpu.name == PROFILES["h200"].name
    return Rates(gemm_fraction=gemm_fraction,
                 attention_tflops=gpu.peak_bf16_tflops * h200.attention_tflops / h200.peak_bf16_tflops,
                 copy_gb_per_s=gpu.hbm_gb_per_s * h200.hbm_gb_per_s / H200_DATASHEET_HBM_GB_PER_S,
                 elementwise_gb_per_s=gpu.hbm_gb_per_s * elementwise_fraction, measured=measured)


PROFILES = {
    "h100-80gb": GpuProfile(
        "NVIDIA H100 SXM 80GB", peak_bf16_tflops=989.0, memory_gib=80.0, hbm_gb_per_s=3350.0,
        intra_node_gb_per_s=450.0, inter_node_gb_per_s=50.0,
        source="NVIDIA H100 datasheet (SXM): 989 TFLOP/s dense BF16, 80 GB HBM3 at 3.35 TB/s, NVLink 900 GB/s "
               "(450 per direction); network as in a DGX H100: one 400 Gb/s ConnectX-7 port per GPU (50 GB/s)."),
    "h200": GpuProfile(
        "NVIDIA H200", peak_bf16_tflops=989.0, memory_gib=MEASURED["H200"].memory_gib, hbm_gb_per_s=4800.0,
        intra_node_gb_per_s=450.0, inter_node_gb_per_s=50.0,
        source="NVIDIA H200 datasheet (SXM): 989 TFLOP/s dense BF16, 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s "
               "(450 per direction); network as in a DGX H200: one 400 Gb/s port per GPU (50 GB/s). Achieved rates "
               "measured on this kit's H200 (helpers/roofline/hardware.py, docs/results/roofline.md)."),
    "a100-80gb": GpuProfile(
        "NVIDIA A100 SXM4 80GB", peak_bf16_tflops=312.0, memory_gib=80.0, hbm_gb_per_s=2039.0,
        intra_node_gb_per_s=300.0, inter_node_gb_per_s=25.0, gemm_fraction=0.81, elementwise_fraction=0.65,
        source="NVIDIA A100 datasheet (SXM4 80GB): 312 TFLOP/s dense BF16, 80 GB HBM2e at 2,039 GB/s, NVLink "
               "600 GB/s (300 per direction); network as in a DGX A100: one 200 Gb/s HDR port per GPU (25 GB/s). "
               "Achieved fractions (large GEMMs 0.81 of peak, memory-bound kernels 0.65 of HBM) fitted on vTrain's "
               "measured A100 iterations (docs/results/advisor.md)."),
    "a100-40gb": GpuProfile(
        "NVIDIA A100 SXM4 40GB", peak_bf16_tflops=312.0, memory_gib=40.0, hbm_gb_per_s=1555.0,
        intra_node_gb_per_s=300.0, inter_node_gb_per_s=25.0, gemm_fraction=0.81, elementwise_fraction=0.65,
        source="NVIDIA A100 datasheet (SXM4 40GB): 312 TFLOP/s dense BF16, 40 GB HBM2 at 1,555 GB/s, NVLink "
               "600 GB/s (300 per direction); network as in a DGX A100: one 200 Gb/s HDR port per GPU (25 GB/s). "
               "Achieved fractions (large GEMMs 0.81 of peak, memory-bound kernels 0.65 of HBM) fitted on vTrain's "
               "measured A100 iterations (docs/results/advisor.md)."),
    "rtx-pro-6000": GpuProfile(
        "NVIDIA RTX PRO 6000 Blackwell Server Edition", peak_bf16_tflops=500.0, memory_gib=96.0,
        hbm_gb_per_s=1792.0, intra_node_gb_per_s=64.0, inter_node_gb_per_s=50.0,
        source="NVIDIA RTX PRO 6000 Blackwell datasheet: 96 GB GDDR7 at 1,792 GB/s, no NVLink (PCIe 5.0 x16: "
               "64 GB/s per direction); dense BF16 = its 4,000 FP4 AI TOPS (with sparsity) / 8 (sparsity, FP4 to FP8, "
               "FP8 to BF16, each x2) = 500 TFLOP/s; network assumed one 400 Gb/s port per GPU (50 GB/s)."),
    "b200": GpuProfile(
        "NVIDIA B200", peak_bf16_tflops=2250.0, memory_gib=180.0, hbm_gb_per_s=8000.0,
        intra_node_gb_per_s=900.0, inter_node_gb_per_s=50.0,
        source="NVIDIA DGX B200 datasheet, per GPU: 72 PFLOP/s FP8 training for 8 GPUs (with sparsity) = 2.25 "
               "PFLOP/s dense BF16, 1,440 GB HBM3e / 8 = 180 GB at 8 TB/s, NVLink 5 1.8 TB/s (900 per direction), "
               "one 400 Gb/s ConnectX-7 port per GPU (50 GB/s)."),
}


REQUIRED = {"name", "peak_bf16_tflops", "memory_gib", "hbm_gb_per_s", "intra_node_gb_per_s", "inter_node_gb_per_s",
            "source"}


def load(path: str | Path) -> GpuProfile:
    """A user's GPU from a JSON file holding GpuProfile's fields (`--list-gpus --json` prints examples)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read the GPU profile {path}: {err}. Write a JSON object with the fields "
                         f"{', '.join(sorted(REQUIRED))}") from None
    if not isinstance(data, dict):
        raise ValueError(f"GPU profile {path}: a JSON object with the fields {', '.join(sorted(REQUIRED))}")
    known = {f.name for f in fields(GpuProfile)}
    missing, extra = sorted(REQUIRED - set(data)), sorted(set(data) - known)
    if missing or extra:
        raise ValueError(f"GPU profile {path}: " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(extra)}"] if extra else []))
            + f". Its fields are {', '.join(sorted(REQUIRED))} (and optionally gemm_fraction, elementwise_fraction)")
    profile = GpuProfile(**data)
    bad = [name for name in known - {"name", "source"} if not (getattr(profile, name) is None and name not in REQUIRED)
           and not (isinstance(getattr(profile, name), (int, float)) and getattr(profile, name) > 0)]
    if bad:
        raise ValueError(f"GPU profile {path}: {', '.join(sorted(bad))} must be positive numbers")
    return profile


def resolve(name_or_path: str) -> GpuProfile:
    """A profile by its key (PROFILES) or a JSON file's path."""
    if name_or_path in PROFILES:
        return PROFILES[name_or_path]
    if Path(name_or_path).suffix == ".json" or Path(name_or_path).exists():
        return load(name_or_path)
    raise ValueError(f"unknown GPU {name_or_path!r}; known: {', '.join(PROFILES)}, or a JSON file with the fields "
                     f"{', '.join(sorted(REQUIRED))}")
