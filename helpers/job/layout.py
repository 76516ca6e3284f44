"""Layout: the parallel sizes of a job (ParallelSizes, helpers/job/sizes.py) placed on nodes,
whether they fit a model, and which rank lands in which group.

`Layout.validate(model)` returns every violated constraint (name, numbers, suggested fix; the
rules live in helpers/job/rules/); `Layout.check(model)` raises one `InvalidLayout` listing
them all. The job runner calls it before any process starts. `Layout.rank_groups()` asks
Megatron-Core's own RankGenerator, the code `initialize_model_parallel` runs, so the prediction
cannot drift from what a live job gets."""
from __future__ import annotations

import functools
import logging
import warnings
from dataclasses import dataclass

from helpers.errors import InvalidLayout
from helpers.job.models import ModelPreset
from helpers.job.rules import layout as rules
from helpers.job.violation import Violation
from helpers.job.sizes import PlacedSizes
from helpers.job.spec import JobSpec

# Megatron's default rank order (initialize_model_parallel's `order`): the leftmost axis varies
# fastest, so TP peers are neighbouring ranks, i.e. GPUs of one node joined by NVLink; PP, whose
# traffic is one activation per microbatch, varies slowest and may cross nodes.
ORDER = "tp-cp-ep-dp-pp"
# Axis name -> RankGenerator token, as parallel_state builds each group.
DENSE_TOKENS = {"tp": "tp", "cp": "cp", "dp": "dp", "dp_cp": "dp-cp", "pp": "pp",
                "mp": "tp-pp"}  # get_model_parallel_group: tensor x pipeline (no CP, no DP)
EXPERT_TOKENS = {"etp": "tp", "ep": "ep", "edp": "dp"}  # on the expert generator, whose "tp" is ETP


@dataclass(frozen=True)
class Layout(PlacedSizes):
    @classmethod
    def on(cls, nodes: int, gpus_per_node: int, **sizes) -> "Layout":
        """A layout filling `nodes` x `gpus_per_node` devices."""
        return cls(nproc=nodes * gpus_per_node, gpus_per_node=gpus_per_node, **sizes)

    @property
    def nodes(self) -> int:
        per = self.gpus_per_node or self.world_size
        return -(-self.world_size // per)

    def describe(self) -> str:
        dense = f"TP{self.tp} CP{self.cp} DP{self.dp} PP{self.pp}" + (f" VPP{self.vpp}" if self.vpp else "")
        return (f"{self.world_size} ranks on {self.nodes} node(s): dense {dense}{' +SP' if self.sp else ''}; "
                f"experts ETP{self.expert_tp} EP{self.ep} EDP{self.edp} PP{self.pp}")

    # ---- validation ----------------------------------------------------------------
    def validate(self, model: ModelPreset, devices: int | None = None) -> list[Violation]:
        """Every constraint this layout breaks for `model` (empty list = valid): the layout rules and
        what the backend builds (helpers/job/rules/layout.py, builder.py). `devices`: accelerators
        available (None = CPU processes, no limit)."""
        return rules.validate(self, model, devices)

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
    def suggest_uneven(num_layers: int, pp: int) -> tuple[int, int] | None:
        return rules.suggest_uneven(num_layers, pp)

    @staticmethod
    def uneven_splits(num_layers: int, pp: int) -> list[tuple[int, int]]:
        return rules.uneven_splits(num_layers, pp)

    def job_spec(self, model: str, **job) -> JobSpec:
        """The JobSpec that runs this layout on one host (Layout.of is the inverse)."""
        return JobSpec(**{**self.parallel_sizes(), "nproc": self.world_size, "model": model, **job})

    # ---- rank grids ----------------------------------------------------------------
    def rank_groups(self, order: str = ORDER) -> dict[str, list[list[int]]]:
        """{axis: [[ranks of group 0], [ranks of group 1], ...]} for tp, cp, dp, dp_cp, pp, mp,
        ep, etp, edp and embedding (first and last stage of each pipeline). `order` is Megatron's
        (change it only to see why Megatron chose its default)."""
        bad = [v for v in rules.sizes(self, None, None) + rules.world(self, None, None)
               if v.name != "world_divisible_nodes"]
        if bad:
            raise InvalidLayout(bad)
        groups = _rank_groups(self.tp, self.cp, self.pp, self.world_size, self.expert_tp, self.ep, order)
        return {axis: [list(g) for g in gs] for axis, gs in groups.items()}

    def groups_of(self, rank: int) -> dict[str, list[int]]:
        """The group of every axis that `rank` belongs to (the shape of one groups.json entry)."""
        return {axis: next(g for g in gs if rank in g)
                for axis, gs in self.rank_groups().items() if any(rank in g for g in gs)}

    def placement(self) -> dict[int, tuple[int, int]]:
        """{rank: (node, local device)}: torchrun numbers ranks node by node."""
        per = self.gpus_per_node or self.world_size
        return {r: (r // per, r % per) for r in range(self.world_size)}

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
