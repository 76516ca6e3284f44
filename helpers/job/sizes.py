"""ParallelSizes: the one place where a job's parallel sizes live and where everything derived from
them is computed (data-parallel size, expert sizes, microbatches). `JobSpec` (what runs) and
`Layout` (what is planned and drawn) both inherit it, so they cannot disagree.

Each field carries a one-line doc in its metadata; the command line (helpers/launch/cli.py) prints
those docs as the flags' help. Plain data: no torch, no Megatron."""
from __future__ import annotations

from dataclasses import dataclass, field, fields


def knob(default, doc: str, **meta):
    """A dataclass field with its one-line doc, CLI hints (choices, aliases, cli=False) and what a job
    made from another does with it: per_run=True, what one run does rather than which weights the
    model starts from (the seed checkpoint's run takes the default); resolved=True, filled in by the
    rules before start (a job repeated from its manifest resolves it again)."""
    kind = {"default_factory": default} if callable(default) else {"default": default}
    return field(**kind, metadata={"doc": doc, **meta})


@dataclass(frozen=True)
class ParallelSizes:
    tp: int = knob(1, "tensor parallel size: each layer's matrices split over this many ranks", per_run=True)
    pp: int = knob(1, "pipeline parallel size: layers split into this many stages", per_run=True)
    vpp: int | None = knob(None, "virtual pipeline stages per rank (interleaved 1F1B); none = off", per_run=True)
    cp: int = knob(1, "context parallel size: the sequence split over this many ranks", per_run=True)
    ep: int = knob(1, "expert parallel size: MoE experts split over this many ranks", per_run=True)
    etp: int | None = knob(None, "expert tensor parallel size; none = tp (Megatron's default)", per_run=True)
    sp: bool = knob(False, "sequence parallel: norms/dropout split over the TP group (needs tp > 1)", per_run=True)
    nproc: int | None = knob(None, "ranks (processes, one per GPU); none = tp*pp*cp; data parallel = nproc/(tp*pp*cp)")
    first_stage_layers: int | None = knob(None, "uneven pipeline: layers on the first stage (none = even split)",
                                          per_run=True)
    last_stage_layers: int | None = knob(None, "uneven pipeline: layers on the last stage (none = even split)",
                                         per_run=True)
    micro_batch: int = knob(1, "sequences per microbatch")
    global_batch: int | None = knob(None, "sequences per iteration over all replicas; none = micro_batch * dp",
                                    per_run=True)
    seq_len: int = knob(64, "tokens per sequence")

    # ---- derived sizes (the only copy) --------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.nproc if self.nproc is not None else self.tp * self.pp * self.cp

    @property
    def dp(self) -> int:
        """Data-parallel replicas of the dense part: world / (tp * pp * cp)."""
        return self.world_size // (self.tp * self.pp * self.cp)

    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def edp(self) -> int:
        """Expert data-parallel replicas: world / (etp * ep * pp)."""
        return self.world_size // (self.expert_tp * self.ep * self.pp)

    @property
    def global_batch_size(self) -> int:
        return self.global_batch if self.global_batch is not None else self.micro_batch * self.dp

    @property
    def num_microbatches(self) -> int:
        """Microbatches each replica runs per iteration."""
        return self.global_batch_size // (self.micro_batch * self.dp)

    def parallel_sizes(self) -> dict:
        """The fields above as keywords (to build a Layout from a JobSpec and back)."""
        return {f.name: getattr(self, f.name) for f in fields(ParallelSizes)}

    def layout_name(self) -> str:
        parts = [f"{k}{v}" for k, v in
                 [("tp", self.tp), ("pp", self.pp), ("vpp", self.vpp or 1), ("cp", self.cp),
                  ("ep", self.ep), ("dp", self.dp)] if v and v > 1]
        if self.sp:
            parts.append("sp")
        if getattr(self, "dist_opt", False):
            parts.append("distopt")
        return "-".join(parts) or "single"


@dataclass(frozen=True)
class PlacedSizes(ParallelSizes):
    """The parallel sizes on a machine: what the layout rules read (helpers/job/rules/layout.py).
    `Layout` (helpers/job/layout.py) adds which rank lands in which group."""
    gpus_per_node: int | None = knob(None, "devices per node; none = all ranks on one node")
    backend: str = knob("local", "local: the kit's worker, no Transformer Engine; te: Megatron-Core with TE")

    @classmethod
    def of(cls, sizes: ParallelSizes, **extra):
        """The sizes of a JobSpec (or any ParallelSizes), placed."""
        return cls(**sizes.parallel_sizes(), **extra)
