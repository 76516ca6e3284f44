"""Layout: the parallel sizes of a job, what they imply, and whether they fit a model.

`Layout.validate(model)` returns every violated constraint (name, numbers, suggested fix);
`Layout.check(model)` raises one `InvalidLayout` listing them all. The job runner calls it
before any process starts. Rank grids come from Megatron-Core's own RankGenerator."""
from __future__ import annotations

from dataclasses import dataclass, field

from helpers.models import ModelPreset


@dataclass(frozen=True)
class Violation:
    name: str  # stable identifier, e.g. "heads_divisible_by_tp"
    message: str  # the numbers involved, in words
    fix: str  # a suggested change

    def __str__(self) -> str:
        return f"[{self.name}] {self.message} -> {self.fix}"


class InvalidLayout(ValueError):
    def __init__(self, violations: list[Violation]):
        self.violations = violations
        lines = "\n".join(f"  - {v}" for v in violations)
        super().__init__(f"invalid layout ({len(violations)} problem(s)):\n{lines}")

    @property
    def names(self) -> list[str]:
        return [v.name for v in self.violations]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


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
    backend: str = "local"  # attention/norm implementation: "local" (no TE) or "te"

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
    def nodes(self) -> int:
        per = self.gpus_per_node or self.world
        return -(-self.world // per)

    # ---- validation ----------------------------------------------------------------
    def validate(self, model: ModelPreset, devices: int | None = None) -> list[Violation]:
        """Every constraint this layout breaks for `model` (empty list = valid).
        `devices`: accelerators available (None = CPU processes, no limit)."""
        v: list[Violation] = []
        add = lambda name, msg, fix: v.append(Violation(name, msg, fix))  # noqa: E731
        sizes = dict(tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep, etp=self.expert_tp,
                     vpp=self.vpp or 1, micro_batch=self.micro_batch, seq_len=self.seq_len)
        for k, val in sizes.items():
            if val < 1:
                add("size_positive", f"{k}={val} must be >= 1", f"set {k} to 1 or more")
        if v:
            return v
        dense = self.tp * self.pp * self.cp
        if self.world % dense:
            add("world_divisible_dense",
                f"world size {self.world} is not divisible by tp*pp*cp = {self.tp}*{self.pp}*{self.cp} = {dense}",
                f"use a world size that is a multiple of {dense}")
        expert = self.expert_tp * self.ep * self.pp
        if self.world % expert:
            add("world_divisible_expert",
                f"world size {self.world} is not divisible by etp*ep*pp = {self.expert_tp}*{self.ep}*{self.pp} = {expert}",
                f"use a world size that is a multiple of {expert}, or change ep/etp")
        if self.gpus_per_node and self.world % self.gpus_per_node:
            add("world_divisible_nodes",
                f"world size {self.world} is not a multiple of gpus_per_node={self.gpus_per_node}",
                "use whole nodes")
        if devices is not None and self.world > devices:
            add("not_enough_devices", f"{self.world} processes but only {devices} device(s) available",
                f"use at most {devices} processes, or run on CPU")
        # Attention and MLP split across TP.
        if model.num_attention_heads % self.tp:
            add("heads_divisible_by_tp",
                f"{model.num_attention_heads} attention heads are not divisible by tp={self.tp}",
                f"use tp in {_divisors(model.num_attention_heads)}")
        if model.kv_heads % self.tp:
            add("query_groups_divisible_by_tp",
                f"{model.kv_heads} query groups (KV heads) are not divisible by tp={self.tp}",
                f"use tp in {_divisors(model.kv_heads)}")
        if model.ffn_hidden_size % self.tp:
            add("ffn_divisible_by_tp", f"ffn_hidden_size {model.ffn_hidden_size} is not divisible by tp={self.tp}",
                f"use tp in {_divisors(model.ffn_hidden_size)[:12]}")
        if model.hidden_size % self.tp:
            add("hidden_divisible_by_tp", f"hidden_size {model.hidden_size} is not divisible by tp={self.tp}",
                "use a tp that divides hidden_size")
        if model.vocab_size % self.tp:
            pass  # Megatron pads the vocabulary to a multiple of tp; not an error.
        # Sequence parallel.
        if self.sp and self.tp == 1:
            add("sp_requires_tp", "sequence parallel splits activations across TP ranks but tp=1",
                "set tp >= 2 or turn sp off")
        if model.is_moe and self.tp > 1 and not self.sp:
            add("moe_tp_requires_sp", f"MoE layers with tp={self.tp} require sequence parallel in Megatron-Core",
                "turn sp on")
        if self.sp and (self.seq_len // max(self.cp, 1)) % self.tp:
            add("seq_divisible_by_tp_for_sp",
                f"sequence length per CP rank {self.seq_len // self.cp} is not divisible by tp={self.tp}",
                "use a sequence length that is a multiple of tp*cp")
        # Pipeline.
        v += self._pipeline_violations(model)
        # Experts.
        if model.is_moe:
            if model.num_experts % self.ep:
                add("experts_divisible_by_ep", f"{model.num_experts} experts are not divisible by ep={self.ep}",
                    f"use ep in {_divisors(model.num_experts)}")
            moe_ffn = model.moe_ffn_hidden_size or model.ffn_hidden_size
            if moe_ffn % self.expert_tp:
                add("expert_ffn_divisible_by_etp",
                    f"expert ffn size {moe_ffn} is not divisible by etp={self.expert_tp}",
                    f"use etp in {_divisors(moe_ffn)[:12]}")
        elif self.ep > 1:
            add("ep_requires_moe", f"ep={self.ep} but model {model.name} has no experts",
                "set ep=1 or choose a MoE model")
        # Context parallel.
        if self.cp > 1 and self.seq_len % (2 * self.cp):
            add("seq_divisible_by_2cp",
                f"sequence length {self.seq_len} is not divisible by 2*cp = {2 * self.cp} "
                "(causal load balancing gives each CP rank two chunks)",
                f"use a sequence length that is a multiple of {2 * self.cp}")
        if self.cp > 1 and self.backend == "local":
            add("cp_needs_te_attention",
                "context parallel needs Transformer Engine's attention; Megatron-Core's local "
                "DotProductAttention refuses cp>1 and the kit's own CP attention is not built yet",
                "set cp=1, or install Transformer Engine (GPU)")
        if self.seq_len > model.max_seq_len:
            add("seq_len_too_long", f"seq_len {self.seq_len} exceeds the model's {model.max_seq_len}",
                f"use seq_len <= {model.max_seq_len}")
        # Batch.
        if self.world % dense == 0:
            per_step = self.micro_batch * self.dp
            if self.global_batch_size % per_step:
                add("global_batch_divisible",
                    f"global batch {self.global_batch_size} is not divisible by micro_batch*dp = "
                    f"{self.micro_batch}*{self.dp} = {per_step}",
                    f"use a global batch that is a multiple of {per_step}")
            elif self.vpp and self.pp > 1 and (self.global_batch_size // per_step) % self.pp:
                add("microbatches_divisible_by_pp_for_vpp",
                    f"interleaved schedule needs the number of microbatches "
                    f"({self.global_batch_size // per_step}) to be a multiple of pp={self.pp}",
                    f"use a global batch that is a multiple of {per_step * self.pp}")
        return v

    def _pipeline_violations(self, model: ModelPreset) -> list[Violation]:
        v = []
        L, pp, vpp = model.num_layers, self.pp, self.vpp or 1
        first, last = self.first_stage_layers, self.last_stage_layers
        if self.vpp and pp == 1:
            v.append(Violation("vpp_requires_pp", f"vpp={self.vpp} needs pp > 1", "set pp >= 2 or vpp off"))
        if (first is not None or last is not None) and pp == 1:
            v.append(Violation("uneven_requires_pp", "uneven first/last stage layers need pp > 1",
                               "set pp >= 2"))
            return v
        if first is None and last is None:
            if L % (pp * vpp):
                fix = (f"use pp*vpp dividing {L} (pp in {_divisors(L)})" if vpp == 1
                       else f"use pp*vpp dividing {L}")
                if vpp == 1 and pp > 1:
                    f_, l_ = self.suggest_uneven(L, pp)
                    fix += f", or an uneven split: first_stage_layers={f_}, last_stage_layers={l_}"
                v.append(Violation("layers_divisible_by_pp",
                                   f"{L} layers are not divisible by pp*vpp = {pp}*{vpp} = {pp * vpp}", fix))
            return v
        rest = L - (first or 0) - (last or 0)
        middle = pp - (first is not None) - (last is not None)
        if rest < 0 or (middle == 0 and rest != 0) or (middle > 0 and (rest % middle or rest // middle < 1)):
            f_, l_ = self.suggest_uneven(L, pp)
            v.append(Violation("uneven_split_invalid",
                               f"first={first}, last={last} leaves {rest} layers for {middle} middle stage(s)",
                               f"e.g. first_stage_layers={f_}, last_stage_layers={l_}"))
        return v

    @staticmethod
    def suggest_uneven(num_layers: int, pp: int) -> tuple[int, int]:
        """First/last stage layer counts that make `num_layers` fit `pp` stages, keeping the middle
        stages equal and the first stage the heavier one (it has no loss head).
        27 layers, pp=2 -> (14, 13)."""
        if pp == 2:
            return (num_layers + 1) // 2, num_layers // 2
        base = num_layers // pp
        rest = num_layers - base * (pp - 2)
        return (rest + 1) // 2, rest // 2

    def check(self, model: ModelPreset, devices: int | None = None) -> None:
        problems = self.validate(model, devices)
        if problems:
            raise InvalidLayout(problems)
