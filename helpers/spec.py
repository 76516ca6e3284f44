"""JobSpec: everything a training job needs, as plain data. The runner writes it into the run
directory as `spec.json`; every worker reads it from there. Safe to import on both sides."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path


@dataclass
class JobSpec:
    # Parallel layout. Data parallel size is derived: dp = nproc / (tp * pp * cp).
    tp: int = 1
    pp: int = 1
    vpp: int | None = None  # virtual pipeline stages per rank (interleaved 1F1B); None = off
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # expert tensor parallel size; None = same as tp (Megatron's default)
    sp: bool = False  # sequence parallel (needs tp > 1)
    dist_opt: bool = False  # distributed optimizer (ZeRO-1 style sharded optimizer state)
    nproc: int | None = None  # None = tp * pp * cp (one data-parallel replica)
    first_stage_layers: int | None = None  # uneven pipeline split (None = even)
    last_stage_layers: int | None = None
    # Model and training.
    model: str = "tiny-gpt"
    model_overrides: dict = field(default_factory=dict)  # e.g. {"num_layers": 2}
    iters: int = 5
    micro_batch: int = 2
    global_batch: int | None = None  # None = micro_batch * dp (one microbatch per replica)
    seq_len: int = 64
    lr: float = 3e-3
    clip_grad: float = 1.0
    seed: int = 1234
    moe_dispatcher: str = "alltoall"  # alltoall | allgather
    # Data (helpers/datasource.py, helpers/runtime/data.py). "synthetic": the deterministic token
    # source of helpers/runtime/synthetic.py; "wikitext": WikiText-2 raw, continued pretraining;
    # "sft": prompt/response JSONL, loss on response tokens only.
    data: str = "synthetic"  # synthetic | wikitext | sft
    tokenizer: str = "byte"  # byte (258 tokens, fits the tiny presets) | gpt2 | qwen3
    data_dir: str | None = None  # None = KIT_DATA_DIR, HF datasets, then generated; a path; "generated"
    eval_interval: int = 0  # validate every K iterations (0 = only after the last); real data only
    eval_iters: int = 2  # global batches per validation and per test pass
    # Where and how.
    device: str = "auto"  # auto | cpu | cuda
    precision: str = "auto"  # auto (fp32 on cpu, bf16 on cuda) | fp32 | bf16
    seed_checkpoint: bool = True  # start from the cached world-size-1 seed checkpoint
    name: str | None = None  # run-directory prefix; None = derived from the layout
    out: str = "runs"
    timeout_s: float = 600.0
    env: dict = field(default_factory=dict)
    # Start the process groups, write groups.json and stop: no model, no data (helpers.probe uses it
    # to show the live groups of layouts whose model the local backend cannot build yet, e.g. CP).
    groups_only: bool = False
    # Checkpoints (helpers/runtime/checkpoint.py). Paths may use $VARS, expanded on each node.
    save_interval: int | None = None  # save every N iterations (and after the last); None = never
    save_dir: str | None = None  # None = <run_dir>/checkpoints
    load_dir: str | list | None = None  # resume from its `latest` (or an iter_* folder); None = fresh start
    load_optimizer: bool = True  # False: load the model only (fresh optimizer, e.g. another optimizer kind)
    # Evaluate load_dir's checkpoint (a path or a list of paths) on a fixed batch, forward only,
    # and write eval.json; no training.
    eval_only: bool = False

    # ---- derived sizes -------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.nproc if self.nproc is not None else self.tp * self.pp * self.cp

    @property
    def dp(self) -> int:
        return self.world_size // (self.tp * self.pp * self.cp)

    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def edp(self) -> int:
        return self.world_size // (self.expert_tp * self.ep * self.pp)

    @property
    def global_batch_size(self) -> int:
        return self.global_batch if self.global_batch is not None else self.micro_batch * self.dp

    @property
    def num_microbatches(self) -> int:
        return self.global_batch_size // (self.micro_batch * self.dp)

    def layout_name(self) -> str:
        parts = [f"{k}{v}" for k, v in
                 [("tp", self.tp), ("pp", self.pp), ("vpp", self.vpp or 1), ("cp", self.cp),
                  ("ep", self.ep), ("dp", self.dp)] if v and v > 1]
        if self.sp:
            parts.append("sp")
        if self.dist_opt:
            parts.append("distopt")
        return "-".join(parts) or "single"

    # ---- (de)serialisation ---------------------------------------------------------
    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "JobSpec":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown JobSpec fields: {sorted(unknown)}")
        return cls(**d)

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2))

    @classmethod
    def read(cls, path: Path) -> "JobSpec":
        return cls.from_dict(json.loads(Path(path).read_text()))
