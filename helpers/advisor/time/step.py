"""One training iteration's time, from the terms (each in its own module of this package, on
helpers/perf/'s GEMMs, links and collectives):

  per microbatch, stage s:  P_s = sum over its layers of (forward + backward incl. recompute)
                                  + the output layer and loss (last stage)
                                  + pipeline sends (1F1B) + unfused gradient accumulation
  pipeline:                 m * max_s P_s + bubble ((pp - 1)/vpp * mean_s P_s)
  after it:                 max_s (exposed DP collectives + optimizer step)

Its inputs: the model, the layout (Layout: sizes, micro and global batch, sequence), the planner's
Training (dist_opt, recompute), a GPU profile with its links, the GPUs per node, and how the
software runs (Execution). `terms` splits the iteration along the critical path (the busiest
stage), so they add up to `step_s`."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from helpers.advisor.execution import MEGATRON_CORE, Execution
from helpers.advisor.time import data_parallel, elementwise, layer, optimizer, pipeline
from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.memory.static import layer_kind, layer_params, stage_layers
from helpers.memory.training import Training
from helpers.perf import gemm, layer_gemms, links
from helpers.perf.gpus import GpuProfile

TERMS = ("gemm", "attention", "elementwise", "tp", "cp", "ep", "host", "recompute", "output_layer", "pp_p2p",
         "grad_accumulate", "bubble", "dp", "optimizer")


@dataclass
class StepTime:
    step_s: float
    tokens_per_s_per_gpu: float
    terms: dict[str, float]  # seconds per iteration on the critical path (TERMS); they add up to step_s
    stage_microbatch_s: list[float] = field(default_factory=list)  # P_s of every stage
    bubble_fraction: float = 0.0


def _stage_params(model: ModelPreset, lay: Layout, stage_layer_ids: list[int], stage: int) -> tuple[float, float]:
    """(dense, expert) parameters of one rank of a stage (layers of a kind hold equal parameters)."""
    dense = expert = 0.0
    by_kind = {}
    for i in stage_layer_ids:
        kind = layer_kind(model, i)
        if kind not in by_kind:
            ps = layer_params(model, lay, i)
            by_kind[kind] = (sum(p.numel for p in ps if not p.expert), sum(p.numel for p in ps if p.expert))
        dense += by_kind[kind][0]
        expert += by_kind[kind][1]
    embedding = model.vocab_size // lay.tp * model.hidden_size
    if stage == 0:
        dense += embedding
    if stage == lay.pp - 1 and not (model.tied_embeddings and lay.pp == 1):
        dense += embedding
    return dense, expert


def predict(model: ModelPreset, lay: Layout, training: Training, gpu: GpuProfile, gpus_per_node: int | None = None,
            execution: Execution = MEGATRON_CORE) -> StepTime:
    gpn = gpus_per_node or lay.gpus_per_node or lay.world_size
    link = {axis: links.of(lay, axis, gpn, gpu) for axis in ("tp", "etp", "cp", "ep", "dp_cp", "edp")}
    m = lay.num_microbatches
    kinds = {}

    def kind_time(kind: str) -> layer.LayerTime:
        if kind not in kinds:
            kinds[kind] = layer.of_kind(model, lay, kind, gpu, link, execution, training.recompute,
                                        training.recomputed_modules)
        return kinds[kind]

    out_gemm = layer_gemms.output_layer(model, lay)
    output_s = (gemm.seconds(out_gemm, gpu) + gemm.total_seconds(out_gemm.backward(), gpu)
                + elementwise.cross_entropy(model, lay, gpu))
    p2p_s = pipeline.sends_per_microbatch_s(model, lay, gpn, gpu)
    stages = []
    for s, chunks in enumerate(stage_layers(model, lay)):
        ids = [i for c in chunks for i in c]
        counts = Counter(layer_kind(model, i) for i in ids)
        parts = Counter()
        for kind, count in counts.items():
            t = kind_time(kind)
            for name, sec in list(t.forward.items()) + list(t.backward.items()):
                parts[name] += count * sec
        dense, expert = _stage_params(model, lay, ids, s)
        parts["output_layer"] = output_s if s == lay.pp - 1 else 0.0
        parts["pp_p2p"] = p2p_s
        parts["grad_accumulate"] = optimizer.accumulate_seconds(dense + expert, gpu, execution, m)
        per_micro = sum(parts.values())
        backward = sum(count * kind_time(k).backward_s for k, count in counts.items())
        sync = data_parallel.sync(dense, expert, lay, training.dist_opt, execution, link["dp_cp"], link["edp"])
        dp = data_parallel.exposed_seconds(sync, execution, backward, per_micro - backward)
        stages.append((per_micro, parts, dp, optimizer.step_seconds(dense, expert, lay, training.dist_opt, gpu)))
    per_micro = [p for p, *_ in stages]
    busiest = max(range(len(stages)), key=lambda s: per_micro[s])
    bubble = pipeline.bubble_seconds(lay.pp, lay.vpp, sum(per_micro) / len(per_micro))
    tail = max(range(len(stages)), key=lambda s: stages[s][2] + stages[s][3])
    terms = {name: 0.0 for name in TERMS}
    for name, sec in stages[busiest][1].items():
        terms[name] += m * sec
    terms.update(bubble=bubble, dp=stages[tail][2], optimizer=stages[tail][3])
    step_s = sum(terms.values())
    tokens = lay.global_batch_size * lay.seq_len
    return StepTime(step_s, tokens / step_s / lay.world_size, terms, per_micro,
                    pipeline.bubble_fraction(lay.pp, lay.vpp, m))
