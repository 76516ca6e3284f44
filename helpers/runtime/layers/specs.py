"""The layer specs the kit builds every GPT with: Megatron-Core's local spec (no Transformer Engine),
chosen per layer from the config, with the kit's modules where the local backend lacks one.

Per layer: a dense MLP or experts (`moe_layer_freq`: DeepSeek's leading dense layers), qk-norm
(per head, or over all heads: full_width_qk_norm.py for OLMoE), multi-latent attention. Replaced by the kit:
  * every norm (input, pre-MLP, final, q/k) -> SequenceParallelNorm: the local WrappedTorchNorm
    refuses sequence parallel;
  * Gemma 3's self-attention -> Megatron-Bridge's Gemma3SelfAttention (local_global_rotary.py);
  * biased experts' down projection -> biased_experts.RowParallelLinearForBiasedExperts (GPT-OSS);
  * MLA's latent norms -> mla.LayerNormColumnParallelLinearForMLA (norm fused into the up
    projection; the local backend has no fused norm-linear), MLA itself -> mla.MLASelfAttentionTP
    (the K-RoPE gradient fix);
  * precision='fp8': the attention and dense-MLP linears -> fp8_linear's (FP8 GEMMs, same comms);
    under the delayed recipe the dense GeLU MLP -> fp8_mlp.FP8GeluMLP (the GeLU inside the FP8 casts);
  * core attention -> the kit's SDPACoreAttention (JobSpec.attention; always for MLA, whose k/v head
    sizes the local one refuses), under CP -> ContextParallelAttention (the local one refuses CP).
Megatron-Core's `get_gpt_decoder_block_spec(use_transformer_engine=False)` does the per-layer choice
too, but with torch norms (no SP) and the stock MLA classes that fail on the local backend."""
from __future__ import annotations

from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_block import (
    TransformerBlockSubmodules,
    get_num_layers_to_build,
)
from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

from helpers.runtime.layers import biased_experts, fp8_linear, fp8_mlp, local_global_rotary, mla, post_norm
from helpers.runtime.layers.attention.context_parallel import ContextParallelAttention
from helpers.runtime.layers.attention.core import SDPACoreAttention
from helpers.runtime.layers.attention.softcap import SoftcapCoreAttention
from helpers.runtime.layers.full_width_qk_norm import FullWidthKNorm, FullWidthQNorm
from helpers.runtime.layers.norm import SequenceParallelNorm


def is_moe_layer(config, layer: int) -> bool:
    """Layer `layer` (0-based, global) has experts: Megatron's `moe_layer_freq` (an int N = every
    N-th layer; a list = one 0/1 per layer)."""
    if not config.num_moe_experts:
        return False
    freq = config.moe_layer_freq
    return bool(freq[layer]) if isinstance(freq, list) else layer % freq == 0


def core_attention(config, attention: str):
    """The layer spec's core attention (JobSpec.attention, resolved): the kit's SDPA one ("sdpa";
    its context-parallel form when cp > 1), or Megatron's local DotProductAttention
    ("megatron_local"), which the spec already holds (None). The rules refuse megatron_local with
    CP (it refuses CP) and with MLA (it refuses MLA's head sizes, Megatron-LM #1589)."""
    if getattr(config, "attn_logit_softcapping", None):  # Gemma 2 (attention/softcap.py)
        return SoftcapCoreAttention
    if config.context_parallel_size > 1:
        return ContextParallelAttention
    return SDPACoreAttention if attention == "sdpa" else None


def layer_spec(config, moe: bool, attention: str, fp8_recipe: str | None = None) -> ModuleSpec:
    use_mla = bool(getattr(config, "multi_latent_attention", False))
    spec = get_gpt_layer_local_spec(
        num_experts=config.num_moe_experts if moe else None, moe_grouped_gemm=False,
        qk_layernorm=config.qk_layernorm and not use_mla, multi_latent_attention=use_mla,
        normalization=config.normalization)
    sub = spec.submodules
    sub.input_layernorm = SequenceParallelNorm
    sub.pre_mlp_layernorm = SequenceParallelNorm
    submodules = sub.self_attention.submodules
    chosen = core_attention(config, attention)
    if chosen is not None:
        submodules.core_attention = chosen
    if use_mla:
        mla.use_in(sub.self_attention, config)
    elif getattr(config, "qk_norm_full_width", False):  # OLMoE (set by helpers/runtime/hf/config.py)
        submodules.q_layernorm = FullWidthQNorm
        submodules.k_layernorm = FullWidthKNorm
    elif config.qk_layernorm:
        submodules.q_layernorm = SequenceParallelNorm
        submodules.k_layernorm = SequenceParallelNorm
    if getattr(config, "sandwich_norms", False) and not moe:  # Gemma 2/3 (post_norm.py)
        post_norm.use_in(spec)
    if getattr(config, "local_global_rotary", False):  # Gemma 3 (local_global_rotary.py)
        local_global_rotary.use_in(spec)
    if moe and config.add_bias_linear:  # GPT-OSS: the experts' in-place bias add (biased_experts.py)
        biased_experts.use_in(spec)
    if fp8_recipe:
        fp8_linear.use_in(spec, fp8_recipe)
        fp8_mlp.use_in(spec, fp8_recipe)
    return spec


def block_spec(config, vp_stage: int | None, attention: str = "sdpa",
               fp8_recipe: str | None = None) -> TransformerBlockSubmodules:
    """The layers this pipeline stage (and virtual stage) builds, each with its own spec
    (`attention`: JobSpec.attention; `fp8_recipe`: the kit's FP8 linears, precision='fp8')."""
    offset = get_transformer_layer_offset(config, vp_stage=vp_stage)
    count = get_num_layers_to_build(config, vp_stage=vp_stage)
    specs = [layer_spec(config, is_moe_layer(config, i), attention, fp8_recipe) for i in range(offset, offset + count)]
    return TransformerBlockSubmodules(layer_specs=specs, layer_norm=SequenceParallelNorm)



def te_block_spec(config, vp_stage: int | None) -> TransformerBlockSubmodules:
    """backend="te": Megatron-Core's own Transformer Engine layer spec per layer and TE's final norm,
    nothing of the kit's (TE's attention does CP and MLA; its norms do SP). A thin switch: TE cannot
    be installed on this kit's machines, so this path has not run here."""
    from megatron.core.extensions.transformer_engine import TENorm
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_layer_with_transformer_engine_spec,
    )

    offset = get_transformer_layer_offset(config, vp_stage=vp_stage)
    count = get_num_layers_to_build(config, vp_stage=vp_stage)
    use_mla = bool(getattr(config, "multi_latent_attention", False))
    specs = [get_gpt_layer_with_transformer_engine_spec(
        num_experts=config.num_moe_experts if is_moe_layer(config, i) else None, moe_grouped_gemm=False,
        qk_layernorm=config.qk_layernorm, multi_latent_attention=use_mla) for i in range(offset, offset + count)]
    return TransformerBlockSubmodules(layer_specs=specs, layer_norm=TENorm)
