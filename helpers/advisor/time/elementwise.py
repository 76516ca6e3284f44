"""The memory-bound kernels of one layer on one rank for one microbatch (norms, residual adds,
rotary, the activation), forward and backward seconds, at the GPU's elementwise rate
(helpers/advisor/gpus.py `rates`). The byte count is the roofline's (helpers/roofline/step.py:
ELEMENTWISE_PER_HIDDEN and ELEMENTWISE_PER_FFN per token and layer); sequence parallel splits the
per-hidden terms over TP, TP always splits the FFN terms. A hybrid layer has one norm and one add,
half a transformer layer's per-hidden terms; a Mamba mixer's gating, convolution and norm are
counted as a gated FFN of its inner width (an approximation). MoE: the FFN terms of the top-k
experts a token visits, plus the shared experts."""
from __future__ import annotations

from helpers.advisor.gpus import GpuProfile, rates
from helpers.advisor.time.layer_gemms import tokens
from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.memory.static import layer_kind
from helpers.roofline.step import BF16, CROSS_ENTROPY_BYTES_PER_LOGIT, ELEMENTWISE_PER_FFN, ELEMENTWISE_PER_HIDDEN


def ffn_width(model: ModelPreset, kind: str) -> tuple[float, str]:
    """(FFN units per token whose activation runs, 'gated' or 'plain') of a layer kind."""
    style = "gated" if model.gated else "plain"
    if kind in ("moe", "E"):
        return model.moe_router_topk * model.expert_ffn + (model.moe_shared_expert_intermediate_size or 0), style
    if kind in ("dense", "-"):
        return model.ffn_hidden_size, style
    if kind == "M":
        return model.mamba_num_heads * model.mamba_head_dim, "gated"
    return 0, style


def layer(model: ModelPreset, lay: Layout, gpu: GpuProfile, kind: str) -> tuple[float, float]:
    """(forward, backward) seconds of a layer of `kind` (helpers/memory/static.layer_kind)."""
    h = model.hidden_size / (lay.tp if lay.sp else 1)
    hidden_share = 0.5 if model.is_hybrid else 1.0
    width, style = ffn_width(model, kind)
    rate = rates(gpu).elementwise_gb_per_s * 1e9
    return tuple(tokens(lay) * (hidden_share * per_h * h + per_f * width / lay.tp) * BF16 / rate
                 for per_h, per_f in zip(ELEMENTWISE_PER_HIDDEN, ELEMENTWISE_PER_FFN[style]))


def layer_of(model: ModelPreset, lay: Layout, gpu: GpuProfile, i: int) -> tuple[float, float]:
    return layer(model, lay, gpu, layer_kind(model, i))


def cross_entropy(model: ModelPreset, lay: Layout, gpu: GpuProfile) -> float:
    """The loss over the vocabulary shard, forward and backward together, on the last stage."""
    return (CROSS_ENTROPY_BYTES_PER_LOGIT * tokens(lay) * model.vocab_size / lay.tp
            / (rates(gpu).elementwise_gb_per_s * 1e9))
