"""The memory-bound kernels of one layer on one rank for one microbatch (norms, residual adds,
rotary, the activation), forward and backward seconds, at the GPU's elementwise rate
(helpers/perf/rates.py). The byte count is the roofline's (helpers/perf/roofline.py:
ELEMENTWISE_PER_HIDDEN and ELEMENTWISE_PER_FFN per token and layer); sequence parallel splits the
per-hidden terms over TP, TP always splits the FFN terms. A hybrid layer has one norm and one add,
half a transformer layer's per-hidden terms; a Mamba mixer's gating, convolution and norm are
counted as a gated FFN of its inner width (an approximation). MoE: the FFN terms of the top-k
experts a token visits, plus the shared experts, plus the router and the token permutations
around the experts (`moe_routing`), plus, for experts whose GLU input is clamped (GPT-OSS), the
clamps and the concatenation that run ahead of the fused activation (`expert_clamp`), and, for
experts with a bias, the per-expert bias added to their output (`expert_bias`)."""
from __future__ import annotations

from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.perf.gpus import GpuProfile
from helpers.perf.layer_gemms import of_kind, routed_pairs, tokens
from helpers.perf.rates import rates
from helpers.perf.roofline import BF16, CROSS_ENTROPY_BYTES_PER_LOGIT, ELEMENTWISE_PER_FFN, ELEMENTWISE_PER_HIDDEN


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


# Values per hidden unit and token a norm moves, forward and backward: its input read and output
# written; the backward reads the input, the output gradient and writes the input gradient (the
# statistics left out)
NORM_PER_HIDDEN = (2, 3)


def _passes_s(values: float, passes: tuple[int, ...], gpu: GpuProfile) -> tuple[float, ...]:
    """Seconds to move `values` bf16 values each of `passes` times (one entry per pass kind: forward,
    backward) at the GPU's elementwise rate."""
    rate = rates(gpu).elementwise_gb_per_s * 1e9
    return tuple(per * values * BF16 / rate for per in passes)


def norms(model: ModelPreset, lay: Layout, gpu: GpuProfile) -> tuple[float, float]:
    """(forward, backward) seconds of a layer's norms (two in a transformer layer, one in a hybrid's), a
    part of `layer`'s per-hidden terms."""
    h = model.hidden_size / (lay.tp if lay.sp else 1)
    count = 1 if model.is_hybrid else 2
    return _passes_s(count * tokens(lay) * h, NORM_PER_HIDDEN, gpu)


def activation(model: ModelPreset, lay: Layout, gpu: GpuProfile, kind: str) -> tuple[float, float]:
    """(forward, backward) seconds of a layer's MLP activation (the experts' with MoE), `layer`'s FFN terms."""
    width, style = ffn_width(model, kind)
    return _passes_s(tokens(lay) * width / lay.tp, ELEMENTWISE_PER_FFN[style], gpu)


# Bytes per value an FP8 linear's quantisation moves (Transformer Engine): its bf16 input read, the FP8
# copy and the FP8 transpose the weight gradient reads written; the same for its output gradient in the
# backward. (TE fuses some of them into the norm or the activation before; counted as separate passes.)
FP8_CAST_BYTES = 4


def fp8_casts(model: ModelPreset, lay: Layout, gpu: GpuProfile, kind: str) -> tuple[float, float]:
    """(forward, backward) seconds of quantising the FP8 linears' inputs and output gradients of a layer."""
    linears = [g for g in of_kind(model, lay, kind) if g.fp8_linear]
    rate = rates(gpu).elementwise_gb_per_s * 1e9
    forward = sum(g.m * g.k * g.batch for g in linears) * FP8_CAST_BYTES / rate
    backward = sum(g.m * g.n * g.batch for g in linears) * FP8_CAST_BYTES / rate
    return forward, backward


def layer(model: ModelPreset, lay: Layout, gpu: GpuProfile, kind: str,
          precision: str = "bf16") -> tuple[float, float]:
    """(forward, backward) seconds of a layer of `kind` (helpers/memory/static.layer_kind); FP8
    training adds its quantisation passes (`fp8_casts`)."""
    h = model.hidden_size / (lay.tp if lay.sp else 1)
    hidden_share = 0.5 if model.is_hybrid else 1.0
    width, style = ffn_width(model, kind)
    rate = rates(gpu).elementwise_gb_per_s * 1e9
    out = tuple(tokens(lay) * (hidden_share * per_h * h + per_f * width / lay.tp) * BF16 / rate
                for per_h, per_f in zip(ELEMENTWISE_PER_HIDDEN, ELEMENTWISE_PER_FFN[style]))
    if kind in ("moe", "E"):
        extra = (moe_routing(model, lay, gpu), expert_clamp(model, lay, gpu), expert_bias(model, lay, gpu))
        out = tuple(o + sum(e[i] for e in extra) for i, o in enumerate(out))
    if precision in ("fp8", "fp4"):  # NVFP4's casts counted as FP8's (a smaller copy, plus its scales)
        casts = fp8_casts(model, lay, gpu, kind)
        out = (out[0] + casts[0], out[1] + casts[1])
    return out


# Bytes per hidden value that Megatron's MoE layer moves around its experts, forward and backward, per
# token-expert pair (P) and per token (T), with its alltoall dispatcher and fused permutation: the
# permutation reads a token and writes each of its k copies (T + P), the copies are sorted by local
# expert after the exchange and back before it (2 x (P + P) with EP > 1), and the unpermutation reads
# the k outputs and writes their probability-weighted sum (P + T); the backward moves the same.
MOE_PASSES_PER_PAIR = 6
MOE_PASSES_PER_TOKEN = 2


def moe_routing(model: ModelPreset, lay: Layout, gpu: GpuProfile) -> tuple[float, float]:
    """(forward, backward) seconds of a MoE layer's router (scores, top-k over its E experts in fp32)
    and token permutations (MOE_PASSES_*), memory-bound, at the GPU's elementwise rate."""
    T = tokens(lay) / (lay.tp if lay.sp else 1)
    pairs = routed_pairs(model, lay)
    sort = 1.0 if lay.ep > 1 and model.num_experts // lay.ep > 1 else 0.0
    per_pair = MOE_PASSES_PER_PAIR - 4 * (1 - sort)  # no sort by local expert: the permutations alone
    nbytes = (per_pair * pairs + MOE_PASSES_PER_TOKEN * T) * model.hidden_size * BF16 \
        + 4 * T * model.num_experts * 4  # router scores, probabilities, top-k mask and gradient (fp32)
    seconds = nbytes / (rates(gpu).elementwise_gb_per_s * 1e9)
    return seconds, seconds


# Values a clamped GLU input moves per token-expert pair before the fused activation, in units of the
# expert width F, forward and backward. Megatron-Core's weighted_bias_quick_geglu_impl, which TEGroupedMLP
# calls with activation_func_clamp_value (moe/experts.py 836-844, core_r0.19.0), clamps the [pairs, 2F]
# fc1 output in eager PyTorch (fusions/fused_bias_geglu.py 424-432): each half clamped into a new tensor
# (F read, F written, twice) and the two concatenated (2F read, 2F written): 8. Backward, autograd applies
# each clamp's mask to its slice of the gradient (gradient and input read, gradient written: 3F, twice)
# and joins the two halves' gradients into the fc1 output's (2F read, 2F written): 10.
CLAMP_PER_FFN = (8, 10)


def clamped_glu_experts(model: ModelPreset) -> bool:
    """Whether the model's experts clamp their GLU input. Megatron-Bridge's GPT-OSS provider sets
    activation_func_clamp_value (7.0), with the clamped quick-GeGLU and a bias on every linear; GPT-OSS is
    the one family the kit has with attention sinks, and the kit names the sinks and the clamped experts
    as one piece of that architecture (helpers/job/architectures.py `attention_sinks`), so the presets'
    attention_sinks flag stands for the clamp as well."""
    return model.is_moe and model.attention_sinks


def expert_clamp(model: ModelPreset, lay: Layout, gpu: GpuProfile) -> tuple[float, float]:
    """(forward, backward) seconds of clamping a MoE layer's expert GLU inputs (CLAMP_PER_FFN), 0 for
    experts without a clamp (`clamped_glu_experts`)."""
    if not clamped_glu_experts(model):
        return 0.0, 0.0
    return _passes_s(routed_pairs(model, lay) * model.expert_ffn / lay.expert_tp, CLAMP_PER_FFN, gpu)


# Values an expert's output bias moves per token-expert pair, in units of the hidden size, forward and
# backward. TEGroupedMLP returns the fc2 bias unapplied and adds it, scaled by the pair's routing
# probability, in eager PyTorch, one local expert at a time (`_apply_bias`, moe/experts.py 313-330,
# called at 902, core_r0.19.0): bias x probability written (H), added to the expert's output (2H read,
# H written), the per-expert pieces concatenated (H read, H written): 6. Backward: the bias gradient
# (the output gradient times the probability, written and read again for the sum over the expert's
# tokens: 3H), the probability gradient (the output gradient times the bias, the same: 3H), and the
# split's gradient joined into the fc2 output's (H read, H written): 8.
BIAS_PER_HIDDEN = (6, 8)


def biased_experts(model: ModelPreset) -> bool:
    """Whether the model's experts carry a bias: a MoE model whose linears have biases
    (`add_bias_linear`, which Megatron applies to the experts' fc1 and fc2 as well)."""
    return model.is_moe and model.add_bias_linear


def expert_bias(model: ModelPreset, lay: Layout, gpu: GpuProfile) -> tuple[float, float]:
    """(forward, backward) seconds of adding a MoE layer's per-expert output bias (BIAS_PER_HIDDEN),
    0 for experts without a bias (`biased_experts`). The fc2 output is the full hidden size on every
    expert-TP rank (its reduction comes later, in the dispatcher)."""
    if not biased_experts(model):
        return 0.0, 0.0
    return _passes_s(routed_pairs(model, lay) * model.hidden_size, BIAS_PER_HIDDEN, gpu)


def cross_entropy(model: ModelPreset, lay: Layout, gpu: GpuProfile) -> float:
    """The loss over the vocabulary shard, forward and backward together, on the last stage."""
    return (CROSS_ENTROPY_BYTES_PER_LOGIT * tokens(lay) * model.vocab_size / lay.tp
            / (rates(gpu).elementwise_gb_per_s * 1e9))
