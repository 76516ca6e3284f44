"""Every layout of a model on N GPUs, each checked by the kit's own rules (Layout.validate:
helpers/job/rules/): the one enumeration behind the advisor (helpers/advisor/: the whole space) and
the memory planner's smallest-fit search (helpers/memory/smallest_fit.py: a narrower `Space`).

Enumerated, for `gpus` GPUs of `gpus_per_node` each:
  TP   every divisor of the GPU count (a TP group wider than a node is kept: it is slow, and the
       time model says how slow, so it ranks low rather than vanishing); without
       Space.tp_beyond_node only those that divide the GPUs per node
  CP   every divisor of what TP leaves (without Space.cp: 1)
  PP   every divisor of what TP x CP leaves, up to the layer count; uneven first/last stages when
       the layers do not divide (each of Layout.uneven_splits)
  VPP  none, or any count of virtual stages that divides each stage's layers (PP > 1; Space.vpp)
  EP   MoE only: every divisor of the GPUs per pipeline stage; ETP 1, or also TP (Megatron's two
       usual; Space.expert_tp)
  SP   on when TP > 1, and also off (Space.sp_off)
  micro batch: the one given, or every divisor of the global batch / DP up to `max_micro_batch`
DP follows: GPUs / (TP x CP x PP). Each layout comes with the names of the rules that refuse it
(none: valid), in this order: TP, CP, PP, VPP, EP, ETP, SP, then the split and the micro batch."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.job.violation import divisors


@dataclass(frozen=True)
class Space:
    """The choices searched besides the plainest (every one by default)."""
    tp_beyond_node: bool = True  # TP sizes that do not divide the GPUs per node (e.g. wider than a node)
    cp: bool = True  # context parallel above 1
    vpp: bool = True  # virtual pipeline stages
    expert_tp: bool = True  # ETP = TP besides ETP = 1 (MoE)
    sp_off: bool = True  # sequence parallel off besides on (TP > 1)


def structures(model: ModelPreset, gpus: int, gpus_per_node: int, space: Space = Space()):
    """(tp, cp, pp, vpp, ep, etp, sp) tuples of the search space above."""
    for tp in (t for t in divisors(gpus) if space.tp_beyond_node or gpus_per_node % t == 0):
        for cp in divisors(gpus // tp) if space.cp else [1]:
            for pp in (p for p in divisors(gpus // (tp * cp)) if p <= model.num_layers):
                per_stage = -(-model.num_layers // pp)
                vpps = [None] + [v for v in range(2, per_stage + 1) if model.num_layers % (pp * v) == 0] \
                    if pp > 1 and space.vpp else [None]
                eps = [e for e in divisors(gpus // pp)] if model.is_moe else [1]
                for vpp in vpps:
                    for ep in eps:
                        for etp in (sorted({1, tp}) if space.expert_tp else [1]) if model.is_moe else [None]:
                            for sp in ((True, False) if space.sp_off else (True,)) if tp > 1 else (False,):
                                yield tp, cp, pp, vpp, ep, etp, sp


def layouts(model: ModelPreset, gpus: int, gpus_per_node: int, seq_len: int, global_batch: int | None = None,
            micro_batch: int | None = None, max_micro_batch: int = 16, backend: str = "local",
            space: Space = Space()) -> Iterator[tuple[Layout, tuple[str, ...]]]:
    """Every (layout, names of the rules that refuse it). `global_batch`: None = one micro batch per
    replica; `micro_batch`: None = every divisor of global_batch / DP up to `max_micro_batch`."""
    for tp, cp, pp, vpp, ep, etp, sp in structures(model, gpus, gpus_per_node, space):
        dp = gpus // (tp * cp * pp)
        # layers the stages do not divide: every split as short on its busiest stage as any, for the
        # plan and the time model to choose among (the first stage holds the most micro batches in flight)
        splits = [(None, None)]
        if pp > 1 and model.num_layers % pp and vpp is None:
            splits = Layout.uneven_splits(model.num_layers, pp)
        if micro_batch is not None:
            micro = [micro_batch]
        else:
            micro = [b for b in divisors(max((global_batch or dp) // dp, 1)) if b <= max_micro_batch] or [1]
        for (first, last), mb in ((split, mb) for split in splits for mb in micro):
            lay = Layout(nproc=gpus, tp=tp, cp=cp, pp=pp, vpp=vpp, ep=ep, etp=etp, sp=sp,
                         first_stage_layers=first, last_stage_layers=last, micro_batch=mb,
                         global_batch=global_batch, seq_len=seq_len, gpus_per_node=gpus_per_node, backend=backend)
            yield lay, tuple(sorted({v.name for v in lay.validate(model)}))
