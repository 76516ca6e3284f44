"""An imported Hugging Face model's Megatron-Core config, through Megatron-Bridge 0.6.2.

`AutoBridge.from_hf_pretrained(folder)` reads config.json; `to_megatron_provider()` turns it into a
provider, which *is* a TransformerConfig (MLATransformerConfig for DeepSeek) plus GPTModel's other
arguments (rotary base and scaling, tied embeddings). The kit keeps the architecture from it and
overrides what the job decides (build.job_fields: layout, precision, CUDA fusions off), then
`finalize()` runs Megatron's deferred config checks. The model itself is built by the kit's own
builder (build.model_chunks, layers/specs.py): the provider's layer spec is Transformer Engine's,
and `provider.provide()` would start NCCL and move to CUDA."""
from __future__ import annotations

import os

from helpers.job import families, megatron_names
from helpers.job.spec import JobSpec

# Provider fields Bridge's model classes turn on that need CUDA kernels or TE (Llama enables the
# bias/softmax/rope fusions, DeepSeek forces gradient_accumulation_fusion and a TE cross entropy),
# beyond what build.job_fields already switches off for every model.
PROVIDER_OVERRIDES = dict(
    moe_shared_expert_overlap=False,
    transformer_impl="local",  # Megatron's MLA qk-norm resolver reads it
)


def open_bridge(hf: dict):
    """Megatron-Bridge's AutoBridge for a local HF folder, its mapping registry edited for the kit's
    builder and the folder's own spelling of any aliased tensor name (registry.py); never touches
    the network. `hf`: the folder's record in model.json (path, architectures, renames), read before
    start (helpers/job/hf_model.Folder.record), so no rank reads config.json or a header for it."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from helpers.runtime.hf import registry, te_standin

    bridge = te_standin.import_auto_bridge(hf["architectures"] or ()).from_hf_pretrained(hf["path"])
    registry.register_kit_modules()
    renames = hf["renames"]
    return registry.edited(bridge, [registry.local_experts] + ([registry.folder_names(renames)] if renames else []))


def provider_config(bridge, spec: JobSpec, on_cpu: bool, bf16: bool):
    """The finalized provider: the imported architecture with the job's layout and precision."""
    from megatron.core.transformer.enums import AttnBackend

    from helpers.runtime import build
    from helpers.runtime.layers import local_global_rotary, mla

    provider = bridge.to_megatron_provider(load_weights=False)
    overrides = {**build.job_fields(spec, on_cpu, bf16), **PROVIDER_OVERRIDES,
                 "attention_backend": AttnBackend.local,
                 **megatron_names.bridge_values(spec, ("seq_len",))}  # the DeepSeek bridge hard-codes 4096
    if provider.num_moe_experts:
        overrides.update(build.moe_job_fields(spec))
    if getattr(provider, "position_embedding_type", None) == "yarn" and \
            getattr(provider, "yarn_correction_range_round_to_int", None) is None:
        # transformers' YaRN rounds its correction range unless config.json says truncate=false;
        # Bridge passes truncate on only when config.json has it, and Megatron reads None as "do not round"
        overrides["yarn_correction_range_round_to_int"] = True
    provider.apply_overrides_and_finalize(overrides=overrides)
    # What the family's builder adds beyond Bridge's provider (helpers/job/families.py)
    family = families.of_architectures(getattr(bridge.hf_pretrained.config, "architectures", None) or ())
    provider.qk_norm_full_width = family.qk_norm == families.FULL_WIDTH
    provider.scale_embedding = family.scaled_embedding
    provider.sandwich_norms = family.sandwich_norms
    if family.local_global_rotary:  # Gemma 3: its windows on five layers of six come with the rotary tables
        local_global_rotary.prepare_config(provider)
    elif provider.sandwich_norms and provider.window_size is not None:
        # Bridge's own Gemma 2 attention windows the odd layers, which Megatron's
        # window_attn_skip_freq=2 says to the kit's attentions
        provider.window_attn_skip_freq = 2
    if provider.multi_latent_attention:
        mla.prepare_config(provider)
    return provider
