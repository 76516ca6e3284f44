"""Layout: the parallel sizes of a job, what they imply, whether they fit a model, and which
rank lands in which group.

`Layout.validate(model)` returns every violated constraint (name, numbers, suggested fix; the
rules live in helpers/constraints.py); `Layout.check(model)` raises one `InvalidLayout` listing
them all. The job runner calls it before any process starts. `Layout.rank_groups()` asks
Megatron-Core's own RankGenerator, the code `initialize_model_parallel` runs, so the prediction
cannot drift from what a live job gets."""
from __future__ import annotations

import functools
import logging
import warnings
from dataclasses import dataclass

from helpers import constraints
from helpers.constraints import InvalidLayout, Violation, divisors  # noqa: F401  (re-exported)
from helpers.models import ModelPreset
from helpers.spec import JobSpec

# Megatron's default rank order (initialize_model_parallel's `order`): the leftmost axis varies
# fastest, so TP peers are neighbouring ranks, i.e. GPUs of one node joined by NVLink; PP, whose
# traffic is one activation per microbatch, varies slowest and may cross nodes.
ORDER = "tp-cp-ep-dp-pp"
# Axis name -> RankGenerator token, as parallel_state builds each group.
DENSE_TOKENS = {"tp": "tp", "cp": "cp", "dp": "dp", "dp_cp": "dp-cp", "pp": "pp",
                "mp": "tp-pp"}  # get_model_parallel_group: tensor x pipeline (no CP, no DP)
EXPERT_TOKENS = {"etp": "tp", "ep": "ep", "edp": "dp"}  # on the expert generator, whose "tp" is ETP


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    vpp: int | None = None
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # None = same as tp
    sp: bool = False
    world_size: int | None = None  # None = tp * pp * cp
    gpus_per_node: int | None = None  # devices per node; None = all ranks on one node
    micro_batch: int = 1
    global_batch: int | None = None  # None = micro_batch * dp
    seq_len: int = 64
    first_stage_layers: int | None = None  # uneven pipeline: layers on the first stage
    last_stage_layers: int | None = None  # uneven pipeline: layers on the last stage
    backend: str = "local"  # "local": the kit's worker, no TE; "te": Megatron-Core with Transformer Engine

    @classmethod
    def on(cls, nodes: int, gpus_per_node: int, **sizes) -> "Layout":
        """A layout filling `nodes` x `gpus_per_node` devices."""
        return cls(world_size=nodes * gpus_per_node, gpus_per_node=gpus_per_node, **sizes)

    # ---- derived sizes -------------------------------------------------------------
    @property
    def world(self) -> int:
        return self.world_size if self.world_size is not None else self.tp * self.pp * self.cp

    @property
    def dp(self) -> int:
        return self.world // (self.tp * self.pp * self.cp)

    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def edp(self) -> int:
        return self.world // (self.expert_tp * self.ep * self.pp)

    @property
    def global_batch_size(self) -> int:
        return self.global_batch if self.global_batch is not None else self.micro_batch * self.dp

    @property
    def num_microbatches(self) -> int:
        return self.global_batch_size // (self.micro_batch * self.dp)

    @property
    def nodes(self) -> int:
        per = self.gpus_per_node or self.world
        return -(-self.world // per)

    def describe(self) -> str:
        dense = f"TP{self.tp} CP{self.cp} DP{self.dp} PP{self.pp}" + (f" VPP{self.vpp}" if self.vpp else "")
        return (f"{self.world} ranks on {self.nodes} node(s): dense {dense}{' +SP' if self.sp else ''}; "
                f"experts ETP{self.expert_tp} EP{self.ep} EDP{self.edp} PP{self.pp}")

    # ---- validation ----------------------------------------------------------------
    def validate(self, model: ModelPreset, devices: int | None = None) -> list[Violation]:
        """Every constraint this layout breaks for `model` (empty list = valid).
        `devices`: accelerators available (None = CPU processes, no limit)."""
        return constraints.check_all(self, model, devices)

    def check(self, model: ModelPreset, devices: int | None = None) -> None:
        problems = self.validate(model, devices)
        if problems:
            raise InvalidLayout(problems)

    def advice(self) -> list[str]:
        """Valid but costly choices (not errors)."""
        out = []
        per = self.gpus_per_node
        if per and self.tp > per:
            out.append(f"TP={self.tp} spans nodes (gpus_per_node={per}): TP all-reduces/all-gathers "
                       "in every layer; keep TP inside a node")
        if per and self.tp * self.cp > per and self.cp > 1:
            out.append(f"TP*CP={self.tp * self.cp} spans nodes: CP exchanges keys/values every layer")
        if per and self.expert_tp * self.ep > per and self.ep > 1:
            out.append(f"ETP*EP={self.expert_tp * self.ep} spans nodes: the MoE all-to-all crosses the network")
        return out

    @staticmethod
    def suggest_uneven(num_layers: int, pp: int) -> tuple[int, int]:
        return constraints.suggest_uneven(num_layers, pp)

    def job_spec(self, model: str, **job) -> JobSpec:
        """The JobSpec that runs this layout on one host (launch.layout_of is the inverse)."""
        return JobSpec(tp=self.tp, pp=self.pp, vpp=self.vpp, cp=self.cp, ep=self.ep, etp=self.etp, sp=self.sp,
                       nproc=self.world, micro_batch=self.micro_batch, global_batch=self.global_batch,
                       seq_len=self.seq_len, first_stage_layers=self.first_stage_layers,
                       last_stage_layers=self.last_stage_layers, model=model, **job)

    # ---- rank grids ----------------------------------------------------------------
    def rank_groups(self, order: str = ORDER) -> dict[str, list[list[int]]]:
        """{axis: [[ranks of group 0], [ranks of group 1], ...]} for tp, cp, dp, dp_cp, pp, mp,
        ep, etp, edp and embedding (first and last stage of each pipeline). `order` is Megatron's
        (change it only to see why Megatron chose its default)."""
        bad = [v for v in constraints.sizes(self, None, None) + constraints.world(self, None, None)
               if v.name != "world_divisible_nodes"]
        if bad:
            raise InvalidLayout(bad)
        groups = _rank_groups(self.tp, self.cp, self.pp, self.world, self.expert_tp, self.ep, order)
        return {axis: [list(g) for g in gs] for axis, gs in groups.items()}

    def groups_of(self, rank: int) -> dict[str, list[int]]:
        """The group of every axis that `rank` belongs to (the shape of one groups.json entry)."""
        return {axis: next(g for g in gs if rank in g)
                for axis, gs in self.rank_groups().items() if any(rank in g for g in gs)}

    def placement(self) -> dict[int, tuple[int, int]]:
        """{rank: (node, local device)}: torchrun numbers ranks node by node."""
        per = self.gpus_per_node or self.world
        return {r: (r // per, r % per) for r in range(self.world)}

    def nodes_of(self, ranks: list[int]) -> list[int]:
        """The nodes a group of ranks touches (one node = its traffic stays on NVLink)."""
        place = self.placement()
        return sorted({place[r][0] for r in ranks})


@functools.cache  # the pictures and widgets ask for the same grids repeatedly
def _rank_groups(tp: int, cp: int, pp: int, world: int, etp: int, ep: int, order: str) -> dict[str, tuple]:
    """Megatron-Core's two RankGenerators, built as initialize_model_parallel builds them: dense
    (tp, cp, dp, pp; ep=1) and expert (etp, ep, edp, pp; cp=1), with the same order string."""
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # "no CUDA runtime" on CPU hosts
    with warnings.catch_warnings():  # importing megatron.core warns about missing TE/apex
        warnings.simplefilter("ignore")
        from megatron.core.parallel_state import RankGenerator, default_embedding_ranks
    dense = RankGenerator(tp=tp, ep=1, dp=world // (tp * cp * pp), pp=pp, cp=cp, order=order)
    expert = RankGenerator(tp=etp, ep=ep, dp=world // (etp * ep * pp), pp=pp, cp=1, order=order)
    groups = {axis: dense.get_ranks(token) for axis, token in DENSE_TOKENS.items()}
    groups.update({axis: expert.get_ranks(token) for axis, token in EXPERT_TOKENS.items()})
    groups["embedding"] = [default_embedding_ranks(ranks) for ranks in groups["pp"]]
    return {axis: tuple(tuple(g) for g in gs) for axis, gs in groups.items()}
