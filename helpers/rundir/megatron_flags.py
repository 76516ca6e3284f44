"""A run's Megatron-Core calls (megatron.json) as Megatron-LM's command-line flags, found through
Megatron-LM's own argument parser (`megatron.training.arguments.add_megatron_arguments`): a value
becomes a flag when Megatron-LM's argument of that name has another default. So the flags are the
ones `pretrain_gpt.py` would need to build the same model at the same layout on GPUs with
Transformer Engine, and they cannot name an option Megatron-LM does not have (the parser is asked,
not a copied list). Every flag of the run directory's megatron-lm.sh is made here
(helpers/rundir/megatron_lm.py adds data, tokenizer, iterations and checkpoints through `named`).

    flags(run.megatron)       -> ["--tensor-model-parallel-size 2", "--sequence-parallel", ...]
    named({"train_iters": 5}) -> ["--train-iters 5"]
    unmapped(run.megatron)    -> the recorded values no Megatron-LM flag sets (set in code)"""
from __future__ import annotations

import argparse
import functools
import json

from helpers.job import megatron_names
from helpers.job.spec import RECOMPUTE_MODULES_DEFAULT

# Megatron-Core's name -> Megatron-LM's argument name, where the two differ (helpers/job/megatron_names.py).
RENAMED = megatron_names.RENAMED
# Recorded values Megatron-LM derives from other flags (so no flag of their own is needed):
# dtypes from --bf16/--fp16, init methods from --init-method-std, KV channels and the FFN width
# from the hidden size, the timeout from --distributed-timeout-minutes' default, and the rest
# Megatron-LM's config builder fills in itself.
DERIVED = {"autocast_dtype", "pipeline_dtype", "params_dtype", "init_method", "output_layer_init_method",
           "embedding_init_method", "embedding_init_method_std", "microbatch_group_size_per_vp_stage",
           "cuda_graph_modules", "inference_cuda_graph_scope", "kv_channels",
           "distributed_timeout_minutes", "gated_linear_unit", "activation_func", "num_query_groups",
           "class", "pre_process", "post_process", "vp_stage", "max_sequence_length",
           "share_embeddings_and_output_weights", "vocab_size", "use_cpu_initialization"}
# What the kit chooses for the machine its job ran on, not for the model or the layout: the fused
# kernels it turns off without apex/Transformer Engine (or on CPU), its core-attention backend,
# and the point-to-point settings Megatron-LM derives from the pipeline layout itself. A GPU
# command leaves them to Megatron-LM's defaults for Transformer Engine.
MACHINE = {"gradient_accumulation_fusion", "bias_activation_fusion", "bias_dropout_fusion",
           "cross_entropy_loss_fusion", "cross_entropy_fusion_impl", "masked_softmax_fusion", "apply_rope_fusion",
           "persist_layer_norm", "moe_grouped_gemm", "moe_permute_fusion", "attention_backend", "use_flash_attn",
           "overlap_p2p_comm", "batch_p2p_comm", "deallocate_pipeline_outputs", "transformer_impl",
           "use_transformer_engine_full_layer_spec"}
TRANSFORMER_IMPL = "transformer_engine"  # what GPU users run; the kit's CPU substitutes are named in the script


def recompute_modules(fields: dict) -> list | None:
    """The recorded recompute_modules when they say something: selective recompute of other modules
    than Megatron's default. TransformerConfig.__post_init__ fills in its default (core_attn) whatever
    the granularity, and Megatron reads the list only for selective recompute."""
    modules = fields.get("recompute_modules")
    if fields.get("recompute_granularity") != "selective" or modules in (None, list(RECOMPUTE_MODULES_DEFAULT)):
        return None
    return list(modules)


@functools.cache
def parser() -> argparse.ArgumentParser:
    """Megatron-LM's argument parser (megatron.training ships with Megatron-Bridge's install)."""
    import warnings

    from helpers.job.import_phase import without_modelopt

    with warnings.catch_warnings(), without_modelopt():
        warnings.simplefilter("ignore")
        from megatron.training.arguments import add_megatron_arguments
    p = argparse.ArgumentParser(allow_abbrev=False)
    add_megatron_arguments(p)
    return p


def _actions() -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser()._actions if a.option_strings}


def config_values(calls: dict) -> dict:
    """Every field of the job's TransformerConfig: the recorded ones (those off its class's default)
    and the class's defaults for the rest. Megatron-LM builds its config from its arguments'
    defaults, not from the class's: MLATransformerConfig's own defaults (multi_latent_attention,
    RMSNorm, kv_lora_rank 512) are flags for pretrain_gpt.py, and so is any TransformerConfig
    default that Megatron-LM's argument of the same name does not share."""
    import dataclasses
    import importlib

    recorded = calls["TransformerConfig"]["fields"]
    module, _, name = calls["TransformerConfig"].get("class", "").rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):  # no class, or another Megatron-Core version's: what it holds
        return dict(recorded)
    values = {}
    for field in dataclasses.fields(cls):
        if field.name in recorded:
            values[field.name] = recorded[field.name]
        elif field.init and field.default not in (dataclasses.MISSING, None):  # None: Megatron-LM's own default
            default = field.default
            values[field.name] = default.name if hasattr(default, "name") and hasattr(default, "value") else default
    return values


def recorded_values(calls: dict) -> list[tuple[str, object]]:
    """Every (name, value) of the record a flag could set, in the order a launch script lists them:
    layout, model, precision, data-parallel and optimizer settings, batch and schedule."""
    model = calls["model"][0] if calls.get("model") else {}
    groups = [calls["initialize_model_parallel"], config_values(calls), model,
              calls.get("DistributedDataParallelConfig", {}), calls.get("OptimizerConfig", {}), calls.get("batch", {})]
    seen, out = set(), []
    for group in groups:
        for name, value in group.items():
            if name not in seen:
                seen.add(name)
                out.append((name, value))
    return out


def _special(calls: dict) -> list[str]:
    """Flags that stand for a combination of values rather than one field."""
    fields = calls["TransformerConfig"]["fields"]
    model = calls["model"][0] if calls.get("model") else {}
    out = [f"--transformer-impl {TRANSFORMER_IMPL}"]
    if fields.get("gated_linear_unit") and "silu" in str(fields.get("activation_func", "")):
        out.append("--swiglu")
    heads, groups = fields.get("num_attention_heads"), fields.get("num_query_groups")
    if groups and heads and groups < heads:
        out += ["--group-query-attention", f"--num-query-groups {groups}"]
    if model and not model.get("share_embeddings_and_output_weights", True):
        out.append("--untie-embeddings-and-output-weights")
    if model.get("max_sequence_length"):
        out.append(f"--max-position-embeddings {model['max_sequence_length']}")
    return out


def _typed(action: argparse.Action, value):
    """A recorded number as the argument's type reads it (a provider's rotary base 100000.0 for an
    int argument is 100000)."""
    if action.type is int and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _flag(action: argparse.Action, value) -> str | None:
    value = _typed(action, value)
    if value == action.default or (value is None and action.default in (None, False)):
        return None
    option = max(action.option_strings, key=len)
    if isinstance(action, argparse._StoreTrueAction):
        return option if value else None
    if isinstance(action, argparse._StoreFalseAction):
        return None if value else option
    if isinstance(value, list) and action.nargs in ("+", "*"):
        return f"{option} {' '.join(str(v) for v in value)}"
    if isinstance(value, list) and getattr(action.type, "__name__", "") == "tuple_type":  # --window-size 7,0
        return f"{option} {','.join(str(v) for v in value)}"
    if isinstance(value, list):  # one argument that Megatron-LM parses itself, e.g. --moe-layer-freq [1,1,1]
        return f"{option} {json.dumps(value, separators=(',', ':'))}"
    return f"{option} {value}"


def flags(calls: dict) -> list[str]:
    """Megatron-LM's flags for the recorded job (each "--name" or "--name value")."""
    actions, out = _actions(), []
    for name, value in recorded_values(calls):
        action = actions.get(RENAMED.get(name, name))
        if name in DERIVED or name in MACHINE or action is None:
            continue
        if name == "recompute_modules" and recompute_modules(calls["TransformerConfig"]["fields"]) is None:
            continue  # Megatron's default, or a list it does not read
        if (flag := _flag(action, value)) is not None:
            out.append(flag)
    return out + _special(calls)


def unmapped(calls: dict) -> dict:
    """Recorded values that no Megatron-LM flag sets and Megatron-LM does not derive (the kit sets
    them in code; a Megatron-LM user would set them in a model provider)."""
    actions = _actions()
    return {name: value for name, value in recorded_values(calls)
            if name not in DERIVED and name not in MACHINE and RENAMED.get(name, name) not in actions}


def choices(name: str) -> tuple:
    """The values Megatron-LM's argument `name` accepts (empty: any)."""
    return tuple(_actions()[name].choices or ())


def named(values: dict) -> list[str]:
    """Flags for Megatron-LM arguments given by their names (`args.<name>`), each spelled by the
    parser: True is the bare switch, None and False are left out (but False is the switch of a
    --no-... argument, which stores False), a list is the argument's words.
    A name Megatron-LM does not have raises KeyError naming it."""
    actions, out = _actions(), []
    for name, value in values.items():
        if name not in actions:
            raise KeyError(f"Megatron-LM has no argument {name!r} (megatron.training.arguments)")
        if isinstance(actions[name], argparse._StoreFalseAction):  # its --no-... switch stores False
            if value is False:
                out.append(actions[name].option_strings[0])
            continue
        if value is None or value is False:
            continue
        option, value = actions[name].option_strings[0], _typed(actions[name], value)
        if value is True:
            out.append(option)
        elif isinstance(value, (list, tuple)):
            out.append(" ".join([option, *(str(v) for v in value)]))
        else:
            out.append(f"{option} {value}")
    return out


# List arguments whose values are names (no spaces): one shell word per value. Other list arguments
# (--data-path) take paths, which may hold spaces: their value stays one word.
NAME_LISTS = {"recompute_modules"}


def words(flag: str) -> list[str]:
    """A flag as its command-line words: the option, then one word per value of a list of names
    (`--recompute-modules core_attn mlp`: Megatron-LM reads two modules), else the value as one
    word. What a launch script quotes word by word."""
    option, _, value = flag.partition(" ")
    if not value:
        return [option]
    action = next((a for a in parser()._actions if option in a.option_strings), None)
    if action is not None and action.dest in NAME_LISTS and action.nargs in ("+", "*"):
        return [option, *value.split(" ")]
    return [option, value]


def parse(flag_list: list[str]) -> argparse.Namespace:
    """Megatron-LM's parser applied to the flags (a check that they mean what the record says)."""
    return parser().parse_args([part for f in flag_list for part in f.split(" ")])
