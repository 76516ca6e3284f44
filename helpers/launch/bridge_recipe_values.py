"""A Megatron-Bridge recipe called on this machine and its ConfigContainer read into plain values
(launch/from_megatron.py turns them into a JobSpec). The recipe runs with the stand-ins Bridge's
training config needs here (runtime/hf/te_standin.py); everything it patches is restored before
the values come back, and a model whose config.json neither the Hugging Face cache nor the Hub can
give is one error."""
from __future__ import annotations

import dataclasses
import importlib
import warnings
from pathlib import Path

from helpers.errors import InvalidJob
from helpers.job import megatron_names


def core_name(name: str) -> str:
    """Megatron-Core's name for a Megatron-LM argument or a Bridge config field (Bridge keeps Megatron-Core's)."""
    return megatron_names.CORE_OF_LM.get(name, name)


# config.json of the Hugging Face models Bridge's recipes build their provider from, for machines
# without the Hub (published numbers; a model cached or reachable on the Hub is read from there).
PUBLISHED_CONFIGS = {
    "meta-llama/Meta-Llama-3-8B": dict(  # https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json
        architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=4096, intermediate_size=14336,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
        max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
        hidden_act="silu", attention_bias=False, mlp_bias=False, bos_token_id=128000, eos_token_id=128001),
}
SECTIONS = ("model", "train", "optimizer", "scheduler", "ddp", "rng", "dataset", "tokenizer", "checkpoint",
            "logger", "validation")


def recipe_values(target: str) -> tuple[dict, dict, str]:
    """`MODULE:FUNCTION` (a Megatron-Bridge recipe returning a ConfigContainer) called and read: (every
    field's value by Megatron-Core's name, {section.field: (core name, value)} for those set away from
    their defaults, the recipe's label)."""
    module_name, _, function = target.partition(":")
    if not function:
        raise InvalidJob(f"[bridge_recipe] {target!r} is not MODULE:FUNCTION -> e.g. "
                         f"megatron.bridge.recipes.llama.llama3:llama3_8b_pretrain_config")
    cfg = _call_recipe(module_name, function)
    from helpers.runtime.measure.megatron_calls import non_defaults

    values, given = {}, {}
    for section in SECTIONS:
        part = getattr(cfg, section, None)
        if dataclasses.is_dataclass(part):
            values.update({f.name: getattr(part, f.name) for f in dataclasses.fields(part) if f.name not in values
                           or section in ("ddp", "scheduler")})  # DDP's overlap and bucket, the schedule's decay
            given.update({f"{section}.{k}": (core_name(k), x) for k, x in non_defaults(part).items()})
    mixed = getattr(cfg, "mixed_precision", None)
    if mixed is not None:  # a recipe name or a MixedPrecisionConfig: its setup() overrides the model's
        # precision fields and the DDP config's gradient dtype
        from megatron.bridge.training.mixed_precision import get_mixed_precision_config

        precision = get_mixed_precision_config(mixed)
        for name in ("bf16", "fp16", "fp8", "fp8_recipe", "fp8_param_gather", "grad_reduce_in_fp32"):
            values[name] = getattr(precision, name)
        given.update({f"mixed_precision.{k}": (core_name(k), x) for k, x in non_defaults(precision).items()
                      if k not in ("params_dtype", "pipeline_dtype", "autocast_dtype")})
    # None: left unset; a mixed-precision switch left False is the recipe's default behaviour
    given = {k: cx for k, cx in given.items() if cx[1] is not None
             and not (k.startswith("mixed_precision.") and cx[1] is False)}
    if not all(values.get(k) for k in ("num_layers", "hidden_size", "num_attention_heads")):
        raise InvalidJob(f"[bridge_recipe] {target} builds no model (num_layers {values.get('num_layers')}, "
                         f"hidden_size {values.get('hidden_size')}, num_attention_heads "
                         f"{values.get('num_attention_heads')}): a template to fill in -> name a model's recipe, "
                         f"e.g. megatron.bridge.recipes.llama.llama3:llama3_8b_pretrain_config")
    values["seq_length"] = getattr(cfg.model, "seq_length", None) or getattr(cfg.dataset, "seq_length", None)
    values["max_position_embeddings"] = values["seq_length"]
    given.pop("model.hf_model_id", None)  # where the provider's config.json came from
    return values, given, function.removesuffix("_config")


def _call_recipe(module_name: str, function: str):
    """Import and call the recipe with the stand-ins Bridge's training config needs on this machine
    (helpers/runtime/hf/te_standin.py), importing Bridge's recipes/ package without its __init__
    (which imports every family's recipes, some needing packages the kit does not install)."""
    import sys
    import types

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import megatron.core  # noqa: F401  (before Bridge: the TE stand-in relies on it)

        from helpers.runtime.hf import te_standin

        with te_standin.training_config_imports():
            recipes, package = importlib.util.find_spec("megatron.bridge.recipes"), None
            if recipes is not None and "megatron.bridge.recipes" not in sys.modules:
                package = types.ModuleType("megatron.bridge.recipes")
                package.__path__ = list(recipes.submodule_search_locations)
                sys.modules["megatron.bridge.recipes"] = package
            try:
                try:
                    recipe = getattr(importlib.import_module(module_name), function)
                except (ImportError, AttributeError) as e:
                    raise InvalidJob(f"[bridge_recipe] cannot import {module_name}:{function} ({e}) -> name a "
                                     f"recipe function of megatron/bridge/recipes/") from None
                with _published_configs():
                    return recipe()
            finally:
                if package is not None and sys.modules.get("megatron.bridge.recipes") is package:
                    del sys.modules["megatron.bridge.recipes"]


class _published_configs:
    """While a recipe runs: AutoBridge.from_hf_pretrained(name) of a model in PUBLISHED_CONFIGS that
    the Hugging Face cache does not hold reads the published config.json from a weightless local
    folder (the same numbers, without the Hub's retries on a machine that cannot reach it)."""

    def __enter__(self):
        from huggingface_hub import try_to_load_from_cache
        from megatron.bridge.models.conversion.auto_bridge import AutoBridge

        self.original = AutoBridge.__dict__["from_hf_pretrained"]
        original = self.original.__func__

        def from_hf_pretrained(cls, path, **kwargs):
            name = str(path)
            if not Path(name).exists() and not isinstance(try_to_load_from_cache(name, "config.json"), str):
                if name in PUBLISHED_CONFIGS:
                    path = str(_config_folder(name))
                else:
                    _fetch_config(name)
            return original(cls, path, **kwargs)

        AutoBridge.from_hf_pretrained = classmethod(from_hf_pretrained)
        return self

    def __exit__(self, *exc):
        from megatron.bridge.models.conversion.auto_bridge import AutoBridge

        AutoBridge.from_hf_pretrained = self.original


def _fetch_config(name: str) -> None:
    """config.json of a Hub model into the Hugging Face cache, or one clear error: Bridge itself
    retries an unreachable Hub for about two minutes and then fails deep inside its loader."""
    from huggingface_hub import hf_hub_download

    try:
        hf_hub_download(name, "config.json")
    except Exception as e:
        raise InvalidJob(
            f"[bridge_recipe] the recipe builds its model from {name}'s config.json on the Hugging Face Hub, "
            f"which this machine cannot reach or may not read ({type(e).__name__}), and the Hugging Face cache "
            f"does not hold it -> fetch it once where the Hub is reachable (`hf download {name} config.json`; "
            f"a gated model needs `hf auth login` first), or pass the run's Megatron-LM flags as megatron_args"
        ) from None


def _config_folder(name: str):
    from helpers.job import paths
    from helpers.launch import tiny_hf

    folder = paths.cache_dir() / "published-configs" / name.replace("/", "--")
    return folder if (folder / "config.json").exists() else tiny_hf.config_only(folder, PUBLISHED_CONFIGS[name])


# ---- shrink and plan -------------------------------------------------------------------------
