"""An imported Hugging Face model's Megatron-Core config, through Megatron-Bridge 0.6.2.

`AutoBridge.from_hf_pretrained(folder)` reads config.json; `to_megatron_provider()` turns it into a
provider, which *is* a TransformerConfig (MLATransformerConfig for DeepSeek) plus GPTModel's other
arguments (rotary base and scaling, tied embeddings). The kit keeps the architecture from it and
overrides what the job decides (build.job_fields: layout, precision, CUDA fusions off), then
`finalize()` runs Megatron's deferred config checks. The model itself is built by the kit's own
builder (build.model_chunks, layer_specs.py): the provider's layer spec is Transformer Engine's,
and `provider.provide()` would start NCCL and move to CUDA."""
from __future__ import annotations

import os

from helpers.job.spec import JobSpec

# Provider fields Bridge's model classes turn on that need CUDA kernels or TE (Llama enables the
# bias/softmax/rope fusions, DeepSeek forces gradient_accumulation_fusion and a TE cross entropy),
# beyond what build.job_fields already switches off for every model.
PROVIDER_OVERRIDES = dict(
    moe_shared_expert_overlap=False,
    transformer_impl="local",  # Megatron's MLA qk-norm resolver reads it
)


# Architectures whose q/k norms span all heads (full_width_qk_norm.py): Bridge builds them with its
# own attention class in a TE layer spec, which the kit replaces.
FULL_WIDTH_QK_NORM = ("OlmoeForCausalLM",)
# Architectures whose embeddings are scaled by sqrt(hidden) (layers/embedding_scale.py): Bridge does it
# in its Gemma providers' provide(), which the kit does not call.
SCALED_EMBEDDING = ("GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM")
# Gemma 2/3: norms after attention and the MLP (layers/post_norm.py); Bridge's own Gemma 2 attention
# windows the odd layers, which Megatron's window_attn_skip_freq=2 says to the kit's attentions.
SANDWICH_NORMS = ("Gemma2ForCausalLM", "Gemma3ForCausalLM")
# Gemma 3: a rotary base per kind of layer, windows on five layers of six (layers/local_global_rotary.py).
LOCAL_GLOBAL_ROTARY = ("Gemma3ForCausalLM",)


def open_bridge(folder: str):
    """Megatron-Bridge's AutoBridge for a local HF folder, its mapping registry edited for the kit's
    builder and the folder's own spelling of any aliased tensor name (registry.py); never touches
    the network."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from helpers.job import hf_model, hf_names
    from helpers.runtime.hf import registry, te_standin

    config = hf_model.read_config(folder)
    bridge = te_standin.import_auto_bridge(config.get("architectures") or ()).from_hf_pretrained(folder)
    registry.register_kit_modules()
    renames = hf_names.renames(hf_model.architecture(config), hf_names.tensor_names(folder))
    return registry.edited(bridge, [registry.local_experts] + ([registry.folder_names(renames)] if renames else []))


def provider_config(bridge, spec: JobSpec, on_cpu: bool, bf16: bool):
    """The finalized provider: the imported architecture with the job's layout and precision."""
    from megatron.core.transformer.enums import AttnBackend

    from helpers.runtime import build
    from helpers.runtime.layers import local_global_rotary, mla

    provider = bridge.to_megatron_provider(load_weights=False)
    overrides = {**build.job_fields(spec, on_cpu, bf16), **PROVIDER_OVERRIDES,
                 "attention_backend": AttnBackend.local,
                 "seq_length": spec.seq_len}  # the DeepSeek bridge hard-codes 4096
    if provider.num_moe_experts:
        overrides["moe_token_dispatcher_type"] = spec.moe_dispatcher
    provider.apply_overrides_and_finalize(overrides=overrides)
    architectures = getattr(bridge.hf_pretrained.config, "architectures", None) or ()
    provider.qk_norm_full_width = any(a in FULL_WIDTH_QK_NORM for a in architectures)
    provider.scale_embedding = any(a in SCALED_EMBEDDING for a in architectures)
    provider.sandwich_norms = any(a in SANDWICH_NORMS for a in architectures)
    if any(a in LOCAL_GLOBAL_ROTARY for a in architectures):
        local_global_rotary.prepare_config(provider)
    elif provider.sandwich_norms and provider.window_size is not None:
        provider.window_attn_skip_freq = 2
    if provider.multi_latent_attention:
        mla.prepare_config(provider)
    return provider
