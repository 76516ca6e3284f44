"""A run's Megatron-Core calls (megatron.json) as Megatron-LM's command-line flags, found through
Megatron-LM's own argument parser (`megatron.training.arguments.add_megatron_arguments`): a value
becomes a flag when Megatron-LM's argument of that name has another default. So the flags are the
ones `pretrain_gpt.py` would need to build the same model at the same layout, and they cannot name
an option Megatron-LM does not have (the parser is asked, not a copied list).

    flags(run.megatron)       -> ["--tensor-model-parallel-size 2", "--sequence-parallel", ...]
    unmapped(run.megatron)    -> the recorded values no Megatron-LM flag sets (set in code)"""
from __future__ import annotations

import argparse
import functools
import json

# Megatron-Core's name -> Megatron-LM's argument name, where the two differ.
RENAMED = {
    "num_moe_experts": "num_experts",
    "virtual_pipeline_model_parallel_size": "num_virtual_stages_per_pipeline_rank",
    "bucket_size": "ddp_bucket_size",
    "grad_reduce_in_fp32": "accumulate_allreduce_grads_in_fp32",
}
# Recorded values Megatron-LM derives from other flags (so no flag of their own is needed):
# dtypes from --bf16/--fp16, init methods from --init-method-std, KV channels and the FFN width
# from the hidden size, the timeout from --distributed-timeout-minutes' default, and the rest
# Megatron-LM's config builder fills in itself.
DERIVED = {"autocast_dtype", "pipeline_dtype", "params_dtype", "init_method", "output_layer_init_method",
           "embedding_init_method", "embedding_init_method_std", "microbatch_group_size_per_vp_stage",
           "recompute_modules", "cuda_graph_modules", "inference_cuda_graph_scope", "kv_channels",
           "distributed_timeout_minutes", "gated_linear_unit", "activation_func", "num_query_groups",
           "class", "pre_process", "post_process", "vp_stage", "max_sequence_length",
           "share_embeddings_and_output_weights", "vocab_size", "use_cpu_initialization"}


@functools.cache
def parser() -> argparse.ArgumentParser:
    """Megatron-LM's argument parser (megatron.training ships with Megatron-Bridge's install)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.training.arguments import add_megatron_arguments
    p = argparse.ArgumentParser(allow_abbrev=False)
    add_megatron_arguments(p)
    return p


def _actions() -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser()._actions if a.option_strings}


def recorded_values(calls: dict) -> list[tuple[str, object]]:
    """Every (name, value) of the record a flag could set, in the order a launch script lists them:
    layout, model, precision, data-parallel and optimizer settings, batch and schedule."""
    model = calls["model"][0] if calls.get("model") else {}
    groups = [calls["initialize_model_parallel"], calls["TransformerConfig"]["fields"], model,
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
    out = [f"--transformer-impl {calls.get('transformer_impl', 'local')}"]
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


def _flag(action: argparse.Action, value) -> str | None:
    if value == action.default or (value is None and action.default in (None, False)):
        return None
    option = max(action.option_strings, key=len)
    if isinstance(action, argparse._StoreTrueAction):
        return option if value else None
    if isinstance(action, argparse._StoreFalseAction):
        return None if value else option
    if isinstance(value, list) and action.nargs in ("+", "*"):
        return f"{option} {' '.join(str(v) for v in value)}"
    if isinstance(value, list):  # one argument that Megatron-LM parses itself, e.g. --moe-layer-freq [1,1,1]
        return f"{option} {json.dumps(value, separators=(',', ':'))}"
    return f"{option} {value}"


def flags(calls: dict) -> list[str]:
    """Megatron-LM's flags for the recorded job (each "--name" or "--name value")."""
    actions, out = _actions(), []
    for name, value in recorded_values(calls):
        action = actions.get(RENAMED.get(name, name))
        if name in DERIVED or action is None:
            continue
        if (flag := _flag(action, value)) is not None:
            out.append(flag)
    return out + _special(calls)


def unmapped(calls: dict) -> dict:
    """Recorded values that no Megatron-LM flag sets and Megatron-LM does not derive (the kit sets
    them in code; a Megatron-LM user would set them in a model provider)."""
    actions = _actions()
    return {name: value for name, value in recorded_values(calls)
            if name not in DERIVED and RENAMED.get(name, name) not in actions}


def parse(flag_list: list[str]) -> argparse.Namespace:
    """Megatron-LM's parser applied to the flags (a check that they mean what the record says)."""
    return parser().parse_args([part for f in flag_list for part in f.split(" ")])
