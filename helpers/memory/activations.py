"""Activation memory: a tensor-by-tensor account of what autograd saves per layer for one
microbatch on the given backend (and the largest transient of its backward), and how many
microbatches a pipeline stage holds in flight under 1F1B or the interleaved schedule."""
from __future__ import annotations

from dataclasses import replace

from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.job.spec import PER_TENSOR_FP8_RECIPES
from helpers.memory.static import layer_kind
from helpers.memory.training import Training


def _attn_act(model: ModelPreset, lay: Layout, tr: Training, T: int, Th: int) -> tuple[float, float]:
    """(saved bytes, largest backward transient) of one attention block for one microbatch.
    T = tokens per rank (seq/CP x micro batch); Th = tokens of the tensors that SP splits."""
    B, h, a, tp = tr.act_bytes, model.hidden_size, model.num_attention_heads, lay.tp
    s = lay.seq_len // lay.cp
    b = lay.micro_batch
    stats = 8 if model.normalization == "LayerNorm" else 4
    sdpa = lay.backend == "local" and tr.attention == "sdpa"
    if model.multi_latent_attention:
        qk = model.qk_head_dim + model.qk_pos_emb_head_dim
        q_w, v_w = a * qk // tp, a * model.v_head_dim // tp
        k_w = q_w  # MLA: every head has its own key (nope + rope parts), as wide as its query
        proj_in = v_w
        # q, k (a heads each), v, the kv latent and its norm input
        qkv_saved = T * (2 * q_w + v_w + 2 * model.kv_lora_rank) * B
    else:
        d = model.kv_channels or h // a
        q_w = a * d // tp
        kv_w = model.kv_heads * d // tp
        k_w = v_w = kv_w
        proj_in = q_w
        # GQA on Megatron's local attention: rope'd q, and k/v repeated to every head (repeat_interleave);
        # SDPA and TE's fused attention take the grouped K/V as they are
        if model.kv_heads < a and not sdpa and lay.backend != "te":
            qkv_saved = 3 * T * q_w * B
        else:  # rope'd q and k are new tensors; v stays a view that keeps the fused qkv output
            # (SDPA takes GQA's K/V as they are: enable_gqa, no repeated copy)
            qkv_saved = (q_w + kv_w + q_w + 2 * kv_w) * T * B
    ln = Th * h * B + Th * stats  # norm input (+ mean/rstd in fp32)
    qkv_in = Th * h * B  # the column-parallel linear saves its un-gathered input
    heads = a // tp
    if lay.backend == "te":  # flash/cuDNN attention: no s x s matrix, softmax stats only
        core = T * heads * 4
        transient = 0.0
    elif lay.cp > 1:  # the kit's ContextParallelAttention (runtime/layers/attention/context_parallel.py): K/V
        # all-gathered, then SDPA with an explicit mask. Not yet checked against a measured GPU peak (needs 2 GPUs).
        s_full = lay.seq_len
        kv_full = b * s_full * (k_w + v_w)  # the gathered K and V (not repeated: enable_gqa)
        # the gathered K and V, the attention output and its log-sum-exp, the mask (bool) and the
        # additive bias the fused kernels make of it
        core = kv_full * B + T * q_w * B + T * heads * 4 + s * s_full * (1 + B)
        transient = T * q_w * B + kv_full * B  # dq and the gathered dk, dv
    elif sdpa:  # the kit's SDPACoreAttention (flash/cuDNN kernels): no s x s matrix
        # saved beyond q, k, v: the attention output (before the head merge copies it for the
        # projection) and the fp32 log-sum-exp of every query row
        core = T * q_w * B + T * heads * 4
        transient = T * (q_w + k_w + v_w) * B  # dq, dk, dv
    else:  # local DotProductAttention: fp32 softmax output (+ its bf16 copy used by bmm unless fp32)
        core = b * heads * s * s * (4 + (B if tr.precision != "fp32" else 0))
        # backward of softmax: grad of probs (B), its fp32 copy, softmax-backward output (fp32)
        transient = b * heads * s * s * (B + 4 + 4)
    saved = ln + qkv_in + qkv_saved + core + T * proj_in * B
    # Selective recompute: what a module recomputes is gone from the forward's keep and back, on top
    # of the backward's own transient, while that module's backward runs
    recomputed = 0.0
    if "core_attn" in tr.recomputed_modules:  # the core attention is recomputed: only q, k, v stay
        recomputed += core
    if "mla_up_proj" in tr.recomputed_modules and model.multi_latent_attention:  # q, k, v after the up projections
        recomputed += T * (q_w + k_w + v_w) * B
    if "layernorm" in tr.recomputed_modules:  # the input norm's output (the QKV linear's input)
        recomputed += qkv_in
    return saved - recomputed, transient + recomputed


def _mlp_act(model: ModelPreset, width: int, tokens: int, split: int, B: int, fused: bool = False) -> float:
    """fc1 output and what the activation saves, fc2 input. `fused`: Megatron's bias-SwiGLU fusion (on
    with Transformer Engine) saves only its input, not the SiLU output beside it."""
    f = width // split
    per = {"swiglu": 4 * f, "geglu": 4 * f, "gelu": 2 * f, "squared_relu": 2 * f}[model.activation]
    if fused and model.activation == "swiglu":
        per = 3 * f
    return tokens * per * B


def layer_activation(model: ModelPreset, lay: Layout, tr: Training, i: int) -> tuple[float, float]:
    """(bytes autograd keeps for layer i for one microbatch, largest backward transient)."""
    B, h, tp = tr.act_bytes, model.hidden_size, lay.tp
    T = lay.seq_len // lay.cp * lay.micro_batch
    Th = T // tp if lay.sp else T
    stats = 8 if model.normalization == "LayerNorm" else 4
    if tr.recompute == "full":  # only the layer's input survives the forward; its backward first runs
        # the forward again, so the layer's whole activations and its own transient live at once then
        saved, transient = layer_activation(model, lay, replace(tr, recompute="none"), i)
        return Th * h * B, saved + transient
    kind = layer_kind(model, i)
    saved, transient = 0.0, 0.0
    if kind in ("dense", "moe", "*"):
        saved, transient = _attn_act(model, lay, tr, T, Th)
    if kind == "M" and lay.backend == "local":
        saved = 2 * Th * h * B + Th * stats + torch_mamba_mixer(model, lay, tr, T)  # norm input + rstd, in_proj input
    elif kind == "M":
        inner = model.mamba_num_heads * model.mamba_head_dim // tp
        bc = 2 * model.mamba_num_groups * model.mamba_state_dim // tp
        heads = model.mamba_num_heads // tp
        # norm input + in_proj input, in_proj output (z, xBC, dt), conv output, SSM output + gated
        # norm input/output, out_proj input; the chunked scan keeps fp32 states per chunk (256 tokens)
        saved = (2 * Th * h * B + T * (2 * inner + bc + heads) * B + T * (inner + bc) * B
                 + 3 * T * inner * B + T // 256 * heads * model.mamba_head_dim * model.mamba_state_dim * 4)
    modules = tr.recomputed_modules
    mlp_ln = Th * h * B + Th * stats + Th * h * B  # pre-MLP norm input, fc1/router input
    if kind in ("dense", "moe", "-", "E") and "layernorm" in modules:  # the pre-MLP norm's output, recomputed
        mlp_ln -= Th * h * B
        transient = max(transient, Th * h * B)
    if kind in ("dense", "-"):
        mlp = _mlp_act(model, model.ffn_hidden_size, T, tp, B, fused=lay.backend == "te")
        saved += mlp_ln + (0 if "mlp" in modules else mlp)  # recomputed: the MLP keeps only its input
        transient = max(transient, mlp if "mlp" in modules else 0)
    elif kind in ("moe", "E"):
        k, E = model.moe_router_topk, model.num_experts
        routed = Th * k * lay.expert_tp  # tokens after dispatch, per rank (balanced routing)
        experts = Th * E * 4 * 3  # router logits, probabilities, routing map (fp32)
        experts += routed * h * B * 2  # permuted tokens (dispatch output) and expert fc1 input
        experts += _mlp_act(model, model.expert_ffn, routed, lay.expert_tp, B, fused=lay.backend == "te") \
            + routed * h * B  # + unpermute input
        if "moe_act" in modules:  # the experts' activation output (their fc2 input), recomputed
            experts -= routed * (model.expert_ffn // lay.expert_tp) * B
        shared = 0.0
        if model.moe_shared_expert_intermediate_size:
            shared = _mlp_act(model, model.moe_shared_expert_intermediate_size, T, tp, B, fused=lay.backend == "te")
        if "shared_experts" in modules:
            transient, shared = max(transient, shared), 0.0
        if "moe" in modules:  # the whole MoE layer recomputed from its input
            transient, experts, shared = max(transient, experts + shared), 0.0, 0.0
        saved += mlp_ln + experts + shared
    # Transformer Engine's FP8 linears save their FP8-cast inputs too (its MoE experts' are left bf16 here)
    if tr.precision == "fp8" and kind in ("dense", "moe", "*"):
        saved, transient = _local_fp8(model, lay, tr, kind, T, Th, saved, transient)
    return saved, transient


def torch_mamba_mixer(model: ModelPreset, lay: Layout, tr: Training, T: int) -> float:
    """Bytes autograd keeps for one microbatch of the kit's pure-torch mixer (helpers/runtime/layers/mamba/:
    in_proj output to out_proj input), counted tensor by tensor on its code in bf16 (CPU, saved-tensor
    hooks; the count below reproduced them exactly): the conv's padded input and output, fp32 copies
    of x, dt, the gate and the norm's inputs, per einsum of the scan its operands (C and B expanded to
    every head, the decays, x*dt), the states between chunks, the gated norm's groups. The states:
    all of them stacked, and each one but the last kept by the update that decays it; the update after
    the last chunk makes a state nothing reads, freed with what it saved when the scan returns. Under
    CP the mixer holds the whole sequence for 1/cp of the heads: the same bytes as T tokens of them all."""
    B, tp = tr.act_bytes, lay.tp
    heads, p, n = model.mamba_num_heads // tp, model.mamba_head_dim, model.mamba_state_dim
    groups = max(model.mamba_num_groups // tp, 1)
    inner, conv = heads * p, heads * p + 2 * groups * n
    q = min(model.mamba_chunk_size, lay.seq_len)
    width = 4  # d_conv
    return (T * conv * B + lay.micro_batch * conv * (lay.seq_len // lay.cp + width - 1) * B  # conv out, padded in
            + 4 * T * heads * 4 + 8 * T * inner * 4  # dt (softplus in, dt, decays), x/gate/norm fp32 tensors
            + 3 * T * heads * q * 4 + 6 * T * heads * n * 4  # in-chunk decay matrices; B, C per head
            + (2 * T // q * heads - lay.micro_batch * heads // lay.cp) * n * p * 4  # chunk states (below)
            + T * groups * 4 + T * inner * B  # the norm's rstd, out_proj input
            + 2 * heads * 4 + q * q + T // q * heads * 4)  # A, the causal mask, each chunk's total decay


def _local_fp8(model, lay, tr, kind, T, Th, saved, transient) -> tuple[float, float]:
    """The kit's FP8 linears (helpers/precision/fp8_matmul.py) instead of bf16 GEMMs.
    Tensorwise (and delayed) keeps each linear's input in FP8 (1 byte) instead of bf16: QKV and FC1 inputs (norm
    outputs nothing else keeps), the projection's input (the head-merged copy; SDPA keeps its own
    output regardless) and FC2's (the activation's output); under SP the gathered input. Rowwise
    keeps the bf16 input as bf16 does (its weight gradient re-quantises it per feature). Backward
    holds one GEMM's quantised operands at a time: the output gradient in FP8 with its transpose
    and the input's transpose (1 byte each), the widest linear's. The weights' FP8 copies are made
    once per step and kept for it (plan.py counts them with the workspace)."""
    B, h, tp = tr.act_bytes, model.hidden_size, lay.tp
    d = model.kv_channels or h // model.num_attention_heads
    q_w = model.num_attention_heads * d // tp
    qkv_w = (model.num_attention_heads + 2 * model.kv_heads) * d // tp
    f = model.ffn_hidden_size // tp * (2 if model.gated else 1)
    f_in = model.ffn_hidden_size // tp
    if tr.fp8_recipe in PER_TENSOR_FP8_RECIPES and not model.multi_latent_attention:
        saved += T * h * 1 - Th * h * B  # QKV input
        saved += T * q_w * (1 - B)  # projection input
        if kind != "moe" and "mlp" not in tr.recomputed_modules:  # the dense MLP's linears (MoE experts stay
            # bf16; a recomputed MLP keeps none of its inputs)
            saved += T * h * 1 - Th * h * B + T * f_in * (1 - B)  # FC1 input, FC2 input
    widest = [(qkv_w, h), (h, q_w)] + ([(f, h), (h, f_in)] if kind != "moe" else [])
    fp8_transient = max(2 * T * n + T * k for n, k in widest)
    return saved, max(transient, fp8_transient)


def chunk_activation(model: ModelPreset, lay: Layout, tr: Training, layers: list[int]) -> tuple[float, float]:
    """(bytes autograd keeps for one model chunk's layers for one microbatch, largest backward
    transient). Full recompute keeps each recomputed unit's input only; the unit's backward first
    runs its layers forward again, so all their activations and the largest transient of them live
    at once then (Training.recomputed_units: uniform or block, recompute_num_layers)."""
    if tr.recompute != "full":
        acts = [layer_activation(model, lay, tr, i) for i in layers]
        return sum(a for a, _ in acts), max((t for _, t in acts), default=0.0)
    plain = replace(tr, recompute="none")
    units, kept = tr.recomputed_units(layers)
    acts = {i: layer_activation(model, lay, plain, i) for i in layers}
    T = lay.seq_len // lay.cp * lay.micro_batch
    unit_input = (T // lay.tp if lay.sp else T) * model.hidden_size * tr.act_bytes
    saved = len(units) * unit_input + sum(acts[i][0] for i in kept)
    transient = max([acts[i][1] for i in kept]
                    + [sum(acts[i][0] for i in u) + max(acts[i][1] for i in u) for u in units], default=0.0)
    return saved, transient


def in_flight(lay: Layout, stage: int) -> int:
    """Model-chunk microbatches whose activations one rank of `stage` holds at once (Megatron's 1F1B
    warm-up + 1; interleaved: warm-up counted in chunk-microbatches)."""
    M, pp, vpp = lay.global_batch_size // (lay.micro_batch * lay.dp), lay.pp, lay.vpp or 1
    if pp == 1:
        return 1
    if vpp == 1:
        return min(pp - stage, M)
    total = M * vpp
    if M == pp:
        return total
    warmup = (pp - stage - 1) * 2 + (vpp - 1) * pp
    return min(warmup + 1, total)
