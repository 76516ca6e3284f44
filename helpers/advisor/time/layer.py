"""One layer's time on one rank for one microbatch, forward and backward, term by term: GEMMs
(helpers/perf/gemm.py over helpers/perf/layer_gemms.py), the attention core (attention.py), memory-bound kernels
(elementwise.py), TP/SP (tensor_parallel.py), CP (context_parallel.py), EP (expert_parallel.py),
a MoE layer's host-bound time (helpers/perf/calibration.MOE_HOST_S) and recompute's extra forward in the backward
(recompute.py). Layers of one kind take equal time,
so a stage's time is a sum over its kinds."""
from __future__ import annotations

from dataclasses import dataclass

from helpers.advisor.execution import Execution
from helpers.advisor.time import attention, context_parallel, elementwise, expert_parallel, recompute, tensor_parallel
from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.perf import calibration, gemm, layer_gemms
from helpers.perf.gpus import GpuProfile
from helpers.perf.links import Link

PARTS = ("gemm", "attention", "elementwise", "tp", "cp", "ep", "host")


@dataclass(frozen=True)
class LayerTime:
    forward: dict[str, float]  # part -> seconds (PARTS)
    backward: dict[str, float]  # part -> seconds, plus "recompute"

    @property
    def forward_s(self) -> float:
        return sum(self.forward.values())

    @property
    def backward_s(self) -> float:
        return sum(self.backward.values())


def of_kind(model: ModelPreset, lay: Layout, kind: str, gpu: GpuProfile, links: dict[str, Link],
            execution: Execution, recompute_mode: str,
            recompute_modules: tuple[str, ...] = ("core_attn",)) -> LayerTime:
    """`links`: {"tp", "etp", "cp", "ep": Link} (helpers/perf/links.py); `recompute_modules`: what
    selective recompute runs again (recompute.py)."""
    gemms = layer_gemms.of_kind(model, lay, kind)
    precision = execution.precision  # FP8 training: the linears' GEMMs in FP8 (gemm.py)
    g_fwd = gemm.total_seconds(gemms, gpu, precision)
    g_bwd = gemm.total_seconds([b for g in gemms for b in g.backward()], gpu, precision)
    column_bwd = gemm.total_seconds([b for g in gemms if g.name in tensor_parallel.COLUMN_PARALLEL
                                     for b in g.backward()], gpu, precision)
    attn = attention.core(model, lay, gpu, execution) if kind in layer_gemms.ATTENTION_KINDS else (0.0, 0.0)
    elem = elementwise.layer(model, lay, gpu, kind, precision)
    tp = tensor_parallel.layer(model, lay, kind, links["tp"], links["etp"], execution, column_bwd)
    cp = context_parallel.layer(model, lay, links["cp"], attn) if kind in layer_gemms.ATTENTION_KINDS else (0.0, 0.0)
    moe = kind in layer_gemms.MOE_KINDS
    ep = expert_parallel.layer(model, lay, links["ep"]) if moe else (0.0, 0.0)
    if moe and execution.ep_overlap and expert_parallel.overlaps(lay, recompute_mode):
        ep = expert_parallel.exposed(ep, (g_fwd + attn[0] + elem[0], g_bwd + attn[1] + elem[1]))
    # a MoE layer's host-bound share (calibration.MOE_HOST_S), half in each direction
    host = calibration.MOE_HOST_S / 2 if moe else 0.0
    forward = dict(zip(PARTS, (g_fwd, attn[0], elem[0], tp[0], cp[0], ep[0], host)))
    backward = dict(zip(PARTS, (g_bwd, attn[1], elem[1], tp[1], cp[1], ep[1], host)))
    modules = {}
    if recompute_mode == "selective":
        modules = _module_forward_s(model, lay, kind, gpu, gemms, precision, ep[0] if moe else 0.0)
    backward["recompute"] = recompute.extra_seconds(recompute_mode, sum(forward.values()), attn[0], recompute_modules,
                                                    modules)
    return LayerTime(forward, backward)


def _module_forward_s(model: ModelPreset, lay: Layout, kind: str, gpu: GpuProfile, gemms: list, precision: str,
                      ep_forward: float) -> dict[str, float]:
    """The forward seconds of each recompute module this layer has (recompute.MODULES but core_attn)."""
    def gemm_s(names) -> float:
        return gemm.total_seconds([g for g in gemms if g.name in names], gpu, precision)

    out = {"layernorm": elementwise.norms(model, lay, gpu)[0]}
    if model.multi_latent_attention:
        out["mla_up_proj"] = gemm_s({"q_up", "kv_up"})
    if kind in layer_gemms.MOE_KINDS:
        # moe_act recomputes the experts' whole activation function, a clamp of its input included
        # (TEGroupedMLP checkpoints bias_act_func: moe/experts.py 882-887, core_r0.19.0)
        act = elementwise.activation(model, lay, gpu, kind)[0] + elementwise.expert_clamp(model, lay, gpu)[0]
        out["moe_act"] = act
        # the experts' output bias is added after fc2, outside moe_act's checkpoint (moe/experts.py 883-902,
        # core_r0.19.0): only the whole-layer module runs it again
        out["moe"] = (gemm_s({g.name for g in gemms if g.name == "router" or ".fc" in g.name}) + act
                      + elementwise.moe_routing(model, lay, gpu)[0] + elementwise.expert_bias(model, lay, gpu)[0]
                      + ep_forward)
    elif kind in ("dense", "-"):
        out["mlp"] = gemm_s({"mlp.fc1", "mlp.fc2"}) + elementwise.activation(model, lay, gpu, kind)[0]
    return out
