"""bridge_recipe.py builds Bridge's GPTModelProvider / MLAModelProvider from the job's recorded
TransformerConfig, which lists only the fields off Megatron-Core's class defaults. Where Bridge's
provider has another default, the recipe must write the field out or Bridge builds another model
(e.g. MLAModelProvider's LayerNorm and multi_latent_attention=False; the softmax in bf16)."""
from __future__ import annotations

import dataclasses

from helpers.rundir import bridge_recipe, megatron_flags


def _defaults(cls) -> dict:
    out = {}
    for field in dataclasses.fields(cls):
        if field.default is not dataclasses.MISSING:
            out[field.name] = field.default
    return out


def test_the_fields_whose_provider_default_differs_are_the_ones_the_recipe_writes():
    import megatron.core  # noqa: F401  (before Bridge: the TE stand-in relies on it)
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    from helpers.runtime.hf import te_standin

    with te_standin.training_config_imports():
        from megatron.bridge.models.gpt_provider import GPTModelProvider
        from megatron.bridge.models.mla_provider import MLAModelProvider
    differ = set()
    for provider, config in ((GPTModelProvider, TransformerConfig), (MLAModelProvider, MLATransformerConfig)):
        theirs, ours = _defaults(provider), _defaults(config)
        differ |= {k for k in ours if k in theirs and repr(theirs[k]) != repr(ours[k])}
    assert differ - megatron_flags.MACHINE == bridge_recipe.PROVIDER_DEFAULTS_DIFFER


def test_an_mla_recipe_names_multi_latent_attention_and_rmsnorm():
    from helpers.job.spec import JobSpec
    from helpers.launch import runner
    from helpers.runtime.measure import megatron_calls

    spec = runner.checked(JobSpec(model="deepseek-v2-lite", ep=2, nproc=2, device="cpu", seq_len=32, iters=1)).spec
    calls = megatron_calls.planned(spec)
    body, _, _ = bridge_recipe._provider(calls, spec)
    assert "MLAModelProvider(" in body
    for line in ("multi_latent_attention=True", "normalization='RMSNorm'", "attention_softmax_in_fp32=True"):
        assert line in body, body
    flags = megatron_flags.flags(calls)
    assert {"--multi-latent-attention", "--normalization RMSNorm", "--kv-lora-rank 512"} <= set(flags), flags
