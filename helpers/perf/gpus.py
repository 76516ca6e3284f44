"""The GPU profiles the kit predicts for: each one's datasheet peaks (dense BF16, and FP8 and FP4
where the GPU has them), device memory, and the two links a collective can take (NVLink or PCIe
inside a node, the network between nodes), with the source of every number as a sentence. "Inside
a node" means inside one NVLink domain: the 8 GPUs of a DGX/HGX board, or the 72 of a GB200/GB300
NVL72 rack (`nvlink_domain`, the advisor's default GPUs per node).

A profile holds datasheet numbers, and where they were measured or fitted for that GPU the fractions
of them it achieves (`gemm_fraction`, `elementwise_fraction`). What the time models take as a GPU's
achieved rates is rates.py's. A user's own GPU is a JSON file with the fields of `GpuProfile`
(helpers/advisor/gpus.py reads it)."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class GpuProfile:
    name: str
    peak_bf16_tflops: float  # dense (no sparsity), vendor datasheet
    memory_gib: float  # device memory a program can allocate from
    hbm_gb_per_s: float  # device memory bandwidth, vendor datasheet
    intra_node_gb_per_s: float  # NVLink (or PCIe) per GPU and direction, vendor datasheet
    inter_node_gb_per_s: float  # network per GPU and direction (the node's NICs shared by its GPUs)
    source: str  # where the numbers come from, as a sentence
    # Dense (no sparsity) FP8 and FP4 tensor-core peaks, vendor datasheet; None where the GPU has no such
    # tensor cores (FP8 from Hopper on, FP4 from Blackwell on)
    peak_fp8_tflops: float | None = None
    peak_fp4_tflops: float | None = None
    # GPUs that share one NVLink (or PCIe) fabric: collectives inside it take intra_node_gb_per_s. 8 for a
    # DGX/HGX board; 72 for an NVL72 rack, whose trays of 4 GPUs all reach each other through NVLink switches
    nvlink_domain: int = 8
    # What this GPU achieves as a fraction of its datasheet, where known for it (else the H200's measured
    # fractions, rates.py): large GEMMs / peak, and memory-bound kernels / HBM bandwidth
    gemm_fraction: float | None = None
    elementwise_fraction: float | None = None

    def with_(self, **changes) -> "GpuProfile":
        return GpuProfile(**{**asdict(self), **changes})

    def peak_tflops(self, precision: str) -> float:
        """The dense tensor-core peak for GEMMs in `precision` ("bf16", "fp8" or "fp4")."""
        if precision == "bf16":
            return self.peak_bf16_tflops
        if precision == "fp8":
            if self.peak_fp8_tflops is None:
                raise ValueError(f"{self.name} has no FP8 tensor cores (its profile gives no peak_fp8_tflops): "
                                 "use bf16")
            return self.peak_fp8_tflops
        if precision == "fp4":
            if self.peak_fp4_tflops is None:
                raise ValueError(f"{self.name} has no FP4 tensor cores (its profile gives no peak_fp4_tflops): "
                                 "use fp8 or bf16")
            return self.peak_fp4_tflops
        raise ValueError(f"precision must be bf16, fp8 or fp4, not {precision!r}")

    def to_dict(self) -> dict:
        return asdict(self)


PROFILES = {
    "h100-80gb": GpuProfile(
        "NVIDIA H100 SXM 80GB", peak_bf16_tflops=989.0, memory_gib=80.0, hbm_gb_per_s=3350.0,
        intra_node_gb_per_s=450.0, inter_node_gb_per_s=50.0, peak_fp8_tflops=1979.0,
        source="NVIDIA H100 datasheet (SXM): 989 TFLOP/s dense BF16, 1,979 dense FP8 (3,958 with sparsity), 80 GB "
               "HBM3 at 3.35 TB/s, NVLink 900 GB/s (450 per direction); network as in a DGX H100: one 400 Gb/s "
               "ConnectX-7 port per GPU (50 GB/s)."),
    "h200": GpuProfile(
        "NVIDIA H200", peak_bf16_tflops=989.0, memory_gib=141, hbm_gb_per_s=4800.0,
        intra_node_gb_per_s=450.0, inter_node_gb_per_s=50.0, peak_fp8_tflops=1979.0,
        source="NVIDIA H200 datasheet (SXM): 989 TFLOP/s dense BF16, 1,979 dense FP8 (3,958 with sparsity), 141 GB "
               "HBM3e at 4.8 TB/s, NVLink 900 GB/s (450 per direction); network as in a DGX H200: one 400 Gb/s "
               "port per GPU (50 GB/s). Achieved rates measured on this kit's H200 (helpers/perf/rates.py, "
               "docs/results/roofline.md)."),
    "a100-80gb": GpuProfile(
        "NVIDIA A100 SXM4 80GB", peak_bf16_tflops=312.0, memory_gib=80.0, hbm_gb_per_s=2039.0,
        intra_node_gb_per_s=300.0, inter_node_gb_per_s=25.0, gemm_fraction=0.88, elementwise_fraction=0.525,
        source="NVIDIA A100 datasheet (SXM4 80GB): 312 TFLOP/s dense BF16 (no FP8 tensor cores), 80 GB HBM2e at "
               "2,039 GB/s, NVLink 600 GB/s (300 per direction); network as in a DGX A100: one 200 Gb/s HDR port "
               "per GPU (25 GB/s). Achieved fractions (large GEMMs 0.88 of peak, memory-bound kernels 0.525 of HBM) "
               "fitted on vTrain's measured A100 iterations (docs/results/advisor.md)."),
    "a100-40gb": GpuProfile(
        "NVIDIA A100 SXM4 40GB", peak_bf16_tflops=312.0, memory_gib=40.0, hbm_gb_per_s=1555.0,
        intra_node_gb_per_s=300.0, inter_node_gb_per_s=25.0, gemm_fraction=0.88, elementwise_fraction=0.525,
        source="NVIDIA A100 datasheet (SXM4 40GB): 312 TFLOP/s dense BF16 (no FP8 tensor cores), 40 GB HBM2 at "
               "1,555 GB/s, NVLink 600 GB/s (300 per direction); network as in a DGX A100: one 200 Gb/s HDR port "
               "per GPU (25 GB/s). Achieved fractions (large GEMMs 0.88 of peak, memory-bound kernels 0.525 of HBM) "
               "fitted on vTrain's measured A100 iterations (docs/results/advisor.md)."),
    "rtx-pro-6000": GpuProfile(
        "NVIDIA RTX PRO 6000 Blackwell Server Edition", peak_bf16_tflops=500.0, memory_gib=96.0,
        hbm_gb_per_s=1792.0, intra_node_gb_per_s=64.0, inter_node_gb_per_s=50.0, peak_fp8_tflops=1000.0,
        peak_fp4_tflops=2000.0,
        source="NVIDIA RTX PRO 6000 Blackwell datasheet: 96 GB GDDR7 at 1,792 GB/s, no NVLink (PCIe 5.0 x16: "
               "64 GB/s per direction); its only tensor-core figure is 4,000 FP4 AI TOPS (with sparsity), so the "
               "dense peaks are derived, each step x2: FP4 2,000, FP8 1,000, BF16 500 TFLOP/s; network assumed one "
               "400 Gb/s port per GPU (50 GB/s); 8 cards per server assumed (nvlink_domain: here the GPUs of one "
               "PCIe fabric)."),
    "b200": GpuProfile(
        "NVIDIA B200", peak_bf16_tflops=2250.0, memory_gib=180.0, hbm_gb_per_s=8000.0,
        intra_node_gb_per_s=900.0, inter_node_gb_per_s=50.0, peak_fp8_tflops=4500.0, peak_fp4_tflops=9000.0,
        source="NVIDIA DGX B200 datasheet, per GPU: 72 PFLOP/s FP8 training for 8 GPUs (with sparsity) = 4.5 "
               "PFLOP/s dense FP8 and 2.25 dense BF16, 144 PFLOP/s FP4 inference (with sparsity) = 9 dense FP4, "
               "1,440 GB HBM3e / 8 = 180 GB at 8 TB/s, NVLink 5 1.8 TB/s (900 per direction), one 400 Gb/s "
               "ConnectX-7 port per GPU (50 GB/s)."),
    "b300": GpuProfile(
        "NVIDIA B300 (Blackwell Ultra)", peak_bf16_tflops=2250.0, memory_gib=288.0, hbm_gb_per_s=8000.0,
        intra_node_gb_per_s=900.0, inter_node_gb_per_s=100.0, peak_fp8_tflops=4500.0, peak_fp4_tflops=13125.0,
        source="NVIDIA DGX B300 / HGX B300 datasheets, per GPU of 8: 72 PFLOP/s FP8/FP6 (with sparsity) = 4.5 "
               "PFLOP/s dense FP8, 36 FP16/BF16 (with sparsity) = 2.25 dense BF16, FP4 144 with sparsity | 105 "
               "dense = 13.125 dense FP4; 2.3 TB HBM3e = 288 GB per GPU; NVLink 5 1.8 TB/s (900 per direction); "
               "eight 800 Gb/s ConnectX-8 ports, one per GPU (100 GB/s). The DGX B300 datasheet gives no memory "
               "bandwidth: 8 TB/s assumed, Blackwell Ultra's as the GB300 NVL72 datasheet gives it (576 TB/s for "
               "72 GPUs)."),
    "gb200": GpuProfile(
        "NVIDIA GB200 NVL72 (Blackwell GPU)", peak_bf16_tflops=2500.0, memory_gib=186.0, hbm_gb_per_s=8000.0,
        intra_node_gb_per_s=900.0, inter_node_gb_per_s=50.0, peak_fp8_tflops=5000.0, peak_fp4_tflops=10000.0,
        nvlink_domain=72,
        source="NVIDIA GB200 NVL72 datasheet, for 72 GPUs (with sparsity): FP4 1,440 PFLOP/s, FP8/FP6 720, "
               "FP16/BF16 360 = per GPU dense 10 PFLOP/s FP4, 5 FP8, 2.5 BF16; up to 13.4 TB HBM3e at 576 TB/s = "
               "186 GB at 8 TB/s per GPU; NVLink 5 130 TB/s = 1.8 TB/s per GPU (900 per direction) among all 72 "
               "GPUs of the rack (one NVLink domain); DGX GB200 compute tray: four 400 Gb/s ConnectX-7 ports for "
               "its four GPUs (50 GB/s per GPU)."),
    "gb300": GpuProfile(
        "NVIDIA GB300 NVL72 (Blackwell Ultra GPU)", peak_bf16_tflops=2500.0, memory_gib=288.0,
        hbm_gb_per_s=8000.0, intra_node_gb_per_s=900.0, inter_node_gb_per_s=100.0, peak_fp8_tflops=5000.0,
        peak_fp4_tflops=15000.0, nvlink_domain=72,
        source="NVIDIA GB300 NVL72 datasheet, for 72 GPUs: FP4 1,440 PFLOP/s with sparsity | 1,080 dense, FP8/FP6 "
               "720 and FP16/BF16 360 with sparsity = per GPU dense 15 PFLOP/s FP4, 5 FP8, 2.5 BF16; 288 GB HBM3e "
               "per GPU (about 20 TB for 72), 576 TB/s = 8 TB/s per GPU; NVLink 5 130 TB/s = 1.8 TB/s per GPU (900 "
               "per direction) among all 72 GPUs of the rack (one NVLink domain); one 800 Gb/s ConnectX-8 per GPU "
               "(100 GB/s)."),
}
