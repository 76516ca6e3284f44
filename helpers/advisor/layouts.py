"""Every layout of a model on N GPUs: the parallel sizes and training choices the advisor weighs,
each checked by the kit's own rules (helpers/job/layout.Layout.validate: helpers/job/rules/).

Enumerated, for `gpus` GPUs of `gpus_per_node` each:
  TP   every divisor of the GPU count (a TP group wider than a node is kept: it is slow, and the
       time model says how slow, so it ranks low rather than vanishing)
  CP   every divisor of what TP leaves
  PP   every divisor of what TP x CP leaves, up to the layer count; uneven first/last stages when
       the layers do not divide (each of Layout.uneven_splits)
  VPP  none, or any count of virtual stages that divides each stage's layers (PP > 1)
  EP   MoE only: every divisor of the GPUs per pipeline stage; ETP 1 or TP (Megatron's two usual)
  SP   on and off when TP > 1
  micro batch: every divisor of the global batch / DP up to `max_micro_batch`
  distributed optimizer: off, and on when there is a data-parallel group to shard over
  activation recompute: none, selective, full
DP follows: GPUs / (TP x CP x PP). A combination the rules refuse is kept with its rule names
(`Candidate.refused`); the training choices (distributed optimizer, recompute) are not rules'
business, so each accepted layout is expanded with them."""
from __future__ import annotations

from dataclasses import dataclass

from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.job.rules.violation import divisors
from helpers.memory.training import Training

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    training: Training | None  # None for a refused layout
    refused: tuple[str, ...] = ()  # the names of the rules that refuse it (helpers/job/rules/)


def structures(model: ModelPreset, gpus: int):
    """(tp, cp, pp, vpp, ep, etp, sp) tuples of the search space above."""
    for tp in divisors(gpus):
        for cp in divisors(gpus // tp):
            for pp in (p for p in divisors(gpus // (tp * cp)) if p <= model.num_layers):
                per_stage = -(-model.num_layers // pp)
                vpps = [None] + [v for v in range(2, per_stage + 1) if model.num_layers % (pp * v) == 0] \
                    if pp > 1 else [None]
                eps = [e for e in divisors(gpus // pp)] if model.is_moe else [1]
                for vpp in vpps:
                    for ep in eps:
                        for etp in sorted({1, tp}) if model.is_moe else [None]:
                            for sp in (True, False) if tp > 1 else (False,):
                                yield tp, cp, pp, vpp, ep, etp, sp


def candidates(model: ModelPreset, gpus: int, gpus_per_node: int, seq_len: int, global_batch: int,
               max_micro_batch: int = 16, backend: str = "te", precision: str = "bf16"):
    """Every Candidate: refused layouts once (with their rules), accepted ones once per training choice."""
    per_node = min(gpus_per_node, gpus)
    for tp, cp, pp, vpp, ep, etp, sp in structures(model, gpus):
        dp = gpus // (tp * cp * pp)
        # layers the stages do not divide: every split as short on its busiest stage as any, for the
        # plan and the time model to choose among (the first stage holds the most micro batches in flight)
        splits = [(None, None)]
        if pp > 1 and model.num_layers % pp and vpp is None:
            splits = Layout.uneven_splits(model.num_layers, pp)
        micro = [b for b in divisors(max(global_batch // dp, 1)) if b <= max_micro_batch] or [1]
        for (first, last), mb in ((split, mb) for split in splits for mb in micro):
            lay = Layout(nproc=gpus, tp=tp, cp=cp, pp=pp, vpp=vpp, ep=ep, etp=etp, sp=sp,
                         first_stage_layers=first, last_stage_layers=last, micro_batch=mb,
                         global_batch=global_batch, seq_len=seq_len, gpus_per_node=per_node, backend=backend)
            found = lay.validate(model)
            if found:
                yield Candidate(lay, None, tuple(sorted({v.name for v in found})))
                continue
            shardable = lay.dp * lay.cp > 1 or (model.is_moe and lay.edp > 1)
            for dist_opt in (False, True) if shardable else (False,):
                for recompute in RECOMPUTE:
                    yield Candidate(lay, Training(precision=precision, dist_opt=dist_opt, recompute=recompute))
