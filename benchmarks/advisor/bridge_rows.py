"""The rows of NVIDIA's published Megatron-Bridge throughput table
($KIT_DATA_DIR/megatron_bridge_perf/pretrain_performance.csv: one tuned layout per model, system, GPU
count and precision, Megatron-Core with Transformer Engine; tokens/s/GPU), and each row as the time
model's inputs (`expressed`) or the reason it cannot be. bridge_table.py scores the time model on
them, bridge_best.py sets each published layout beside the advisor's pick.

What the table does not say is taken as Megatron-Bridge's performance recipes usually set it, and
named here: the distributed optimizer on, expert tensor parallel 1, sequence parallel with TP > 1,
no activation recompute, gradients reduced in bf16 (the performance recipes' _benchmark_common
sets grad_reduce_in_fp32 False, in perf_recipes/_common.py of megatron-bridge 0.6.2), balanced
routing ("dropless" and "tokendrop" alike), a layer count the pipeline does not divide timed as
its busiest model chunk, GB200/GB300 jobs in NVLink domains of up to 72 GPUs (`nvlink_domain`).
What a row's own recipe sets beyond those (expert all-to-all overlap, recompute modules, activation
offloading) is `RECIPES`'."""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from helpers.advisor.execution import MEGATRON_CORE, Execution
from helpers.job import paths
from helpers.job.layout import Layout
from helpers.job.models import ModelPreset, preset
from helpers.memory.training import Training
from helpers.perf import gpus

# The table's model names (before any " (variant)") -> the kit's presets, built from the models'
# published config.json (helpers/job/models.py); None: no published configuration here
MODELS = {"LLAMA3_8B": "llama3-8b", "LLAMA3_70B": "llama3-70b", "LLAMA3.1_405B": "llama3.1-405b",
          "DeepSeekV3": "deepseek-v3", "Qwen3_30B_a3B": "qwen3-30b-a3b", "Qwen3_235B_a22B": "qwen3-235b-a22b",
          "GPT OSS 120B": "gpt-oss-120b", "Kimi_K2": "kimi-k2", "Nemotron_3_Nano": "nemotron-3-nano-30b-a3b",
          "Nemotron_3_Super": None}
SYSTEMS = {"DGX-H100": "h100-80gb", "DGX-B200": "b200", "DGX-B300": "b300", "DGX-GB200": "gb200",
           "DGX-GB300": "gb300"}
# The table's precision labels: FP8 (delayed scaling), FP8-CS (current scaling), FP8-MX / MXFP8
# (32-element blocks with E8M0 scales: Blackwell), NVFP4 (16-element blocks with FP8 scales: Blackwell)
PRECISIONS = {"BF16": "bf16", "FP8": "fp8", "FP8-CS": "fp8", "FP8-MX": "fp8", "MXFP8": "fp8", "NVFP4": "fp4"}


# Settings of Megatron-Bridge's performance recipes (megatron-bridge 0.6.2, package
# megatron/bridge/perf_recipes/<model>/<system>/) that the table does not show, keyed by the table's
# (model, system, precision labels, TP, PP, VP, EP, micro batch): each recipe whose layout is the row's.
# "ep_overlap": overlap_moe_expert_parallel_comm (Qwen3-235B-A22B on H100 with moe_a2a_overlap and the
# alltoall dispatcher; the Blackwell MXFP8 recipes of Qwen3 and DeepSeek-V3 through their HybridEP
# full-iteration helpers; GPT-OSS on GB200 in BF16); "recompute_modules": selective recompute of those
# modules (recompute_granularity "selective"); "offload_layers": cpu_offloading_num_layers (activation
# offloading, Llama 3 70B with Megatron-FSDP on GB200/GB300). The table does not say which recipe
# version each release ran: a row with the recipe's layout is taken to run its settings.
FP8_LABELS = ("FP8", "FP8-CS")
MXFP8_LABELS = ("MXFP8", "FP8-MX")
_OVERLAP = {"ep_overlap": True}
_MLA_UP = {"recompute_modules": ("mla_up_proj",)}
_GPT_OSS = {"recompute_modules": ("layernorm", "moe_act")}
RECIPES = {
    ("Qwen3_235B_a22B", "DGX-H100", FP8_LABELS + ("BF16",), 2, 8, 4, 32, 1): _OVERLAP,
    ("Qwen3_235B_a22B", "DGX-GB300", MXFP8_LABELS, 1, 4, 12, 32, 2): _OVERLAP,
    ("Qwen3_235B_a22B", "DGX-GB200", MXFP8_LABELS, 1, 8, 3, 32, 1): _OVERLAP,
    ("Qwen3_30B_a3B", "DGX-GB300", MXFP8_LABELS, 1, 1, None, 8, 8): _OVERLAP,
    ("Qwen3_30B_a3B", "DGX-B300", MXFP8_LABELS, 1, 1, None, 8, 8): _OVERLAP,
    ("Qwen3_30B_a3B", "DGX-GB200", MXFP8_LABELS, 1, 1, None, 8, 4): _OVERLAP,
    ("Qwen3_30B_a3B", "DGX-B200", MXFP8_LABELS, 1, 1, None, 8, 4): _OVERLAP,
    ("DeepSeekV3", "DGX-GB200", MXFP8_LABELS, 1, 4, 4, 64, 1): {**_OVERLAP, **_MLA_UP},
    ("DeepSeekV3", "DGX-B200", MXFP8_LABELS, 1, 16, None, 8, 1): _MLA_UP,
    ("DeepSeekV3", "DGX-H100", FP8_LABELS + ("BF16",), 2, 8, 4, 64, 1): {"recompute_modules": ("mla_up_proj", "mlp")},
    ("Kimi_K2", "DGX-GB300", MXFP8_LABELS, 1, 4, 4, 64, 2): _MLA_UP,
    ("GPT OSS 120B", "DGX-GB200", ("BF16",), 1, 1, None, 64, 4): {**_OVERLAP, **_GPT_OSS},
    ("GPT OSS 120B", "DGX-B200", ("BF16",), 1, 1, None, 8, 4): _GPT_OSS,
    ("GPT OSS 120B", "DGX-H100", ("BF16",), 1, 4, None, 8, 1): _GPT_OSS,
    ("Nemotron_3_Nano", "DGX-H100", FP8_LABELS, 1, 1, None, 8, 1):
        {"recompute_modules": ("moe", "layernorm", "core_attn", "moe_act")},
    ("LLAMA3_70B", "DGX-GB300", FP8_LABELS, 1, 1, None, 1, 2): {"offload_layers": 20},
    ("LLAMA3_70B", "DGX-GB200", FP8_LABELS, 1, 1, None, 1, 2): {"offload_layers": 40},
}
EXECUTION_SETTINGS = ("ep_overlap",)  # the rest are Training's


def recipe_settings(row: "Published") -> dict:
    """The MoE settings of the row's recipe (RECIPES), {} where none is known."""
    for (family, system, labels, tp, pp, vp, ep, mbs), settings in RECIPES.items():
        if (row.family, row.system, row.tp, row.pp, row.vp, row.ep, row.mbs) == (family, system, tp, pp, vp, ep, mbs) \
                and row.precision in labels:
            return settings
    return {}


def data_path() -> Path | None:
    return paths.data_file("megatron_bridge_perf", "pretrain_performance.csv")


@dataclass(frozen=True)
class Published:
    release: str
    system: str
    model: str
    gpus: int
    precision: str
    gbs: int
    mbs: int
    seq: int
    fsdp: int
    tp: int
    pp: int
    cp: int
    vp: int | None
    ep: int
    tokens_per_s_per_gpu: float

    @property
    def family(self) -> str:
        return self.model.split(" (")[0]

    @property
    def case(self) -> tuple:
        return (self.family, self.system, self.gpus, self.precision)


def _size(text: str) -> int | None:
    """A layout column: "n/a" (not used) is None."""
    return None if text == "n/a" else int(text)


def read(path: Path) -> list[Published]:
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            vp = _size(r["vp"])
            out.append(Published(r["release"], r["system"], r["model"], int(r["gpus"]), r["precision"],
                                 int(r["gbs"]), int(r["mbs"]), int(r["seq"]), _size(r["fsdp"]) or 0,
                                 _size(r["tp"]) or 1, _size(r["pp"]) or 1, _size(r["cp"]) or 1,
                                 vp if vp and vp > 1 else None, _size(r["ep"]) or 1, float(r["tok_s_gpu"])))
    return out


def model_of(row: Published) -> ModelPreset | str:
    """The preset for a row, or why there is none."""
    name = MODELS.get(row.family)
    if name is None:
        return f"{row.family}: no published configuration in the kit"
    m = preset(name)
    if "w/o MTP" in row.model:
        m = m.with_(mtp_num_layers=0)
    return m


def expressed(row: Published) -> tuple[ModelPreset, Layout, Training, gpus.GpuProfile] | str:
    """The row as the time model's inputs, or the reason it cannot be."""
    m = model_of(row)
    if isinstance(m, str):
        return m
    if row.precision not in PRECISIONS:
        return f"precision {row.precision}: the time model has no GEMM rate for it"
    if SYSTEMS[row.system] not in gpus.PROFILES:
        return f"{row.system}: no GPU profile"
    gpu = gpus.PROFILES[SYSTEMS[row.system]]
    chunks = row.pp * (row.vp or 1)
    if m.num_layers % chunks:
        # Megatron-Bridge's recipes split such a model unevenly (the embedding and the loss counted as a
        # layer each, or an explicit pipeline layout): timed as its busiest model chunk, every chunk
        # holding ceil(layers / chunks) layers
        m = m.with_(num_layers=-(-m.num_layers // chunks) * chunks,
                    first_k_dense=min(m.first_k_dense, -(-m.num_layers // chunks) * chunks - 1))
    domain = nvlink_domain(row.gpus, gpu.nvlink_domain)
    lay = Layout(nproc=row.gpus, tp=row.tp, pp=row.pp, cp=row.cp, ep=row.ep, etp=1 if m.is_moe else None,
                 vpp=row.vp, sp=row.tp > 1, micro_batch=row.mbs, global_batch=row.gbs, seq_len=row.seq,
                 gpus_per_node=domain, backend="te")
    if row.gbs % (row.mbs * lay.dp):
        return f"global batch {row.gbs} is not a multiple of micro batch x DP ({row.mbs} x {lay.dp})"
    problems = [v for v in lay.validate(m) if v.category != "backend"]  # the layout rules, not the kit's worker
    if problems:
        return "the layout rules refuse it: " + "; ".join(v.name for v in problems)
    fsdp = "optim_grads_params" if row.fsdp else None
    # the memory planner has no NVFP4: planned as FP8 (both keep bf16 weights beside a low-precision copy);
    # the GEMMs take the row's own precision (precision_execution)
    recipe = {k: v for k, v in recipe_settings(row).items() if k not in EXECUTION_SETTINGS}
    if "recompute_modules" in recipe:
        recipe["recompute"] = "selective"
    training = Training(precision="fp8" if PRECISIONS[row.precision] == "fp4" else PRECISIONS[row.precision],
                        dist_opt=True, fsdp=fsdp, grad_reduce_in_fp32=False, **recipe)
    return m, lay, training, gpu


def nvlink_domain(world: int, largest: int) -> int:
    """GPUs per NVLink domain of a job: the profile's (8 in a DGX node, 72 in an NVL72 rack), or for a
    job that does not fill whole racks the largest divisor of its GPU count up to that size that
    whole compute trays of 4 make (256 GPUs on NVL72 racks: 4 domains of 64)."""
    if world <= largest:
        return world
    return max(d for d in range(4, largest + 1, 4) if world % d == 0) if largest > 8 else largest


def precision_execution(training: Training, row: Published | None = None) -> Execution:
    """Megatron-Core's execution with the row's precision and gradient-reduce dtype, and its recipe's
    MoE settings (`recipe_settings`) when given the row."""
    precision = PRECISIONS[row.precision] if row is not None else training.precision
    return MEGATRON_CORE.with_(precision=precision, grad_reduce_bytes=4 if training.grad_reduce_in_fp32 else 2,
                               **{k: v for k, v in (recipe_settings(row) if row is not None else {}).items()
                                  if k in EXECUTION_SETTINGS})
