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


def open_bridge(folder: str):
    """Megatron-Bridge's AutoBridge for a local HF folder; never touches the network."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from helpers.job import hf_model
    from helpers.runtime.hf import te_standin

    architectures = hf_model.read_config(folder).get("architectures") or ()
    return te_standin.import_auto_bridge(architectures).from_hf_pretrained(folder)


def provider_config(bridge, spec: JobSpec, on_cpu: bool, bf16: bool):
    """The finalized provider: the imported architecture with the job's layout and precision."""
    from megatron.core.transformer.enums import AttnBackend

    from helpers.runtime import build
    from helpers.runtime.layers import mla

    provider = bridge.to_megatron_provider(load_weights=False)
    overrides = {**build.job_fields(spec, on_cpu, bf16), **PROVIDER_OVERRIDES,
                 "attention_backend": AttnBackend.local,
                 "seq_length": spec.seq_len}  # the DeepSeek bridge hard-codes 4096
    if provider.num_moe_experts:
        overrides["moe_token_dispatcher_type"] = spec.moe_dispatcher
    provider.apply_overrides_and_finalize(overrides=overrides)
    if provider.multi_latent_attention:
        mla.prepare_config(provider)
    return provider
