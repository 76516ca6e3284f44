"""bridge_recipe.py: a run as a Megatron-Bridge 0.6.2 recipe, a Python file with
`def config() -> ConfigContainer` built from Bridge's own classes (its GPT provider with the
model and the layout, or `AutoBridge.from_hf_pretrained(FOLDER).to_megatron_provider()` for an
imported HF folder; TrainingConfig, ValidationConfig, OptimizerConfig, SchedulerConfig, DDP config,
the dataset (GPTDatasetConfig over the job's indexed datasets, MockGPTDatasetConfig for synthetic
tokens), TokenizerConfig, CheckpointConfig, LoggerConfig, RNGConfig, "bf16_mixed"), and the two
lines that run it under torchrun: `pretrain(config(), forward_step)`. Rank 0 writes it next to
megatron.json (helpers/runtime/measure/megatron_calls.py) from the same record as megatron-lm.sh.

The provider takes Megatron's local layer spec when the kit's job ran on it and Megatron's local
modules accept the layout (they refuse sequence parallelism and CP > 1); Transformer Engine's spec
otherwise. `check_bridge_recipes` builds each recipe's ConfigContainer with Bridge's own code on
CPU (helpers/runtime/hf/recipe_check.py, in a fresh process) and reports its sizes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.errors import MegatronRefused
from helpers.job import megatron_names
from helpers.rundir import megatron_flags, megatron_lm, names

LAYOUT_ROWS = megatron_names.layout_rows()
LAYOUT = tuple(n.core for n in LAYOUT_ROWS)
# The job's other TransformerConfig fields, activation recompute: Bridge puts it on the model provider,
# with Megatron-Core's names.
RECOMPUTE = tuple(n.core for n in megatron_names.for_object(megatron_names.TRANSFORMER_CONFIG)
                  if n.model_kind is None and n not in LAYOUT_ROWS)
# Recorded config fields a provider does not take from the record: the layout (from the job), dtypes
# and precision flags (mixed_precision="bf16_mixed" sets them), values Megatron derives, and the
# kit's choices for its own machine (megatron_flags.MACHINE).
NOT_FROM_RECORD = (set(LAYOUT) | megatron_flags.DERIVED | megatron_flags.MACHINE | set(RECOMPUTE)
                   | {"bf16", "fp16", "params_dtype", "transformer_layer_spec", "timers", "fp8", "fp8_recipe"}) \
    - {"kv_channels", "num_query_groups", "gated_linear_unit", "activation_func"}
# Config fields whose default in Bridge's GPTModelProvider / MLAModelProvider differs from
# Megatron-Core's TransformerConfig / MLATransformerConfig (the record lists a field only when it is
# off the latter's default), so a provider needs them written out even when the record omits them.
# Machine fields (megatron_flags.MACHINE) stay Bridge's. tests/unit/test_bridge_recipe_defaults.py
# derives this set from Bridge's classes.
PROVIDER_DEFAULTS_DIFFER = {"attention_softmax_in_fp32", "normalization", "multi_latent_attention"}
CALLABLES = {"activation_func"}  # recorded as their import path (megatron_calls.jsonable)
OPTIMIZER_SKIP = {"bf16", "fp16", "params_dtype", "main_grads_dtype", "main_params_dtype", "exp_avg_dtype",
                  "exp_avg_sq_dtype", "timers"}


def layout(spec) -> dict:
    return {n.core: n.megatron_value(spec) for n in LAYOUT_ROWS}


def recompute(fields: dict) -> dict:
    """The provider's recompute fields for the recorded config: those set, and the modules only when
    they say something (megatron_flags.recompute_modules)."""
    values = {k: fields[k] for k in RECOMPUTE[:3] if fields.get(k) is not None}
    if (modules := megatron_flags.recompute_modules(fields)) is not None:
        values["recompute_modules"] = modules
    return values


def local_spec_refusal(spec) -> str | None:
    """Why Megatron's local layer spec cannot build this layout (None: it can)."""
    if spec.sp:
        return "sequence parallelism (its WrappedTorchNorm asserts no SP)"
    if spec.cp > 1:
        return "CP > 1 (its DotProductAttention asserts CP = 1)"
    return None


def _value(name: str, value) -> str:
    if name in CALLABLES and isinstance(value, str) and "." in value and "(" not in value:
        return f"_named({value!r})"
    return repr(value)


def _call_args(values: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in values.items())


def _kwargs(values: dict, indent: str) -> str:
    return "".join(f"{indent}{k}={_value(k, v)},\n" for k, v in values.items())


def _provider(calls: dict, spec) -> tuple[str, list[str], list[str]]:
    """The model() function's body, the imports it needs, and comment lines."""
    notes, imports = [], []
    use_local = calls.get("transformer_impl") == "local" and local_spec_refusal(spec) is None
    fields = calls["TransformerConfig"]["fields"]
    mla = "MLA" in calls["TransformerConfig"]["class"].rsplit(".", 1)[-1]
    if calls.get("transformer_impl") == "local" and not use_local:
        notes.append(f"layer spec: Megatron's local modules refuse {local_spec_refusal(spec)}; Transformer "
                     "Engine's spec here")
    if spec.hf_model:
        imports.append("from megatron.bridge import AutoBridge")
        lines = [f"    provider = AutoBridge.from_hf_pretrained({spec.hf_model!r}).to_megatron_provider(load_weights=True)"]
        if use_local:
            imports.append("from megatron.bridge.models.gpt_provider import default_layer_spec, local_layer_spec")
            lines.append("    if getattr(provider, \"transformer_layer_spec\", None) is default_layer_spec:  # a model's own spec stays")
            lines.append("        provider.transformer_layer_spec = local_layer_spec")
        values = {**layout(spec), **megatron_names.bridge_values(spec, ("seq_len",)),
                  **{k: fields[k] for k in ("hidden_dropout", "attention_dropout") if k in fields},
                  **recompute(fields)}
        lines += [f"    provider.{k} = {v!r}" for k, v in values.items()]
        lines.append("    # rotary embedding and MoE token permutation unfused, as the kit's job ran them (the fused kernels")
        lines.append("    # are Transformer Engine's)")
        lines.append("    provider.apply_rope_fusion = False")
        lines.append("    provider.moe_permute_fusion = False")
        return "\n".join(lines + ["    return provider"]), imports, notes
    model = calls["model"][0]
    cls = "MLAModelProvider" if mla else "GPTModelProvider"
    imports.append(f"from megatron.bridge.models.{'mla_provider' if mla else 'gpt_provider'} import {cls}")
    full = megatron_flags.config_values(calls)
    values = {k: v for k, v in fields.items() if k not in NOT_FROM_RECORD}
    values.update({k: full[k] for k in sorted(PROVIDER_DEFAULTS_DIFFER) if k in full and k not in values})
    values.update(vocab_size=model["vocab_size"], **megatron_names.bridge_values(spec, ("seq_len",)),
                  share_embeddings_and_output_weights=model.get("share_embeddings_and_output_weights", False),
                  position_embedding_type=model.get("position_embedding_type", "rope"),
                  rotary_base=model.get("rotary_base", 10000), rotary_percent=model.get("rotary_percent", 1.0))
    values.update(layout(spec))
    values.update(recompute(fields))
    if use_local and not mla:
        imports.append("from megatron.bridge.models.gpt_provider import local_layer_spec")
        body = _kwargs(values, "        ") + "        transformer_layer_spec=local_layer_spec,\n"
    else:
        body = _kwargs(values, "        ")
    return f"    return {cls}(\n{body}    )", imports, notes


def _dataset(calls: dict, spec) -> tuple[str, str]:
    """The dataset config expression and its class."""
    data = calls.get("data") or {"kind": "synthetic"}
    common = (f"seq_length={spec.seq_len!r}, random_seed={spec.seed!r}, reset_position_ids=False, "
              "reset_attention_mask=False, eod_mask_loss=False, dataloader_type='single'")
    if data["kind"] == "synthetic":
        return f"MockGPTDatasetConfig({common})", "MockGPTDatasetConfig"
    prefixes = data["prefixes"]
    if "all" in prefixes:
        where = f"blend=([{prefixes['all']!r}], None), split={(data.get('split') or spec.data_split)!r}"
    else:
        where = "blend_per_split=[" + ", ".join(f"([{prefixes[s]!r}], None)" for s in ("train", "valid", "test")) + "]"
    return f"GPTDatasetConfig({common},\n                                 {where})", "GPTDatasetConfig"


def _tokenizer(calls: dict, spec) -> str:
    args, _, _ = megatron_lm.tokenizer_arguments(calls, spec)
    return "TokenizerConfig(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"


def _checkpoint(spec, run_dir: Path) -> str:
    values = {}
    if spec.save_interval:
        # a folder of its own: run beside the kit's job, it must not overwrite the kit's checkpoints
        values[megatron_names.bridge_field("save_dir")] = str(Path(run_dir) / names.BRIDGE_CHECKPOINTS)
        values.update(megatron_names.bridge_values(spec, ("save_interval",)))
    if spec.load_dirs():  # the first of several (the kit's eval_only)
        values.update(megatron_names.bridge_values(spec, ("load_dir", "load_optimizer")))
    return "CheckpointConfig(" + ", ".join([*(f"{k}={v!r}" for k, v in values.items()), "ckpt_format='torch_dist'"]) + ")"


def recipe(calls: dict, spec, run_dir: Path) -> str:
    """The recipe file's text."""
    provider, imports, notes = _provider(calls, spec)
    dataset, dataset_class = _dataset(calls, spec)
    _, lm_notes, _ = megatron_lm.command_flags(calls, spec, run_dir)
    real = dataset_class == "GPTDatasetConfig"
    weight_decay = calls.get("OptimizerConfig", {}).get("weight_decay", 0.01)  # MCore's OptimizerConfig default
    bridge = megatron_names.bridge_values
    optimizer = {"optimizer": "adam", **bridge(spec, ("lr", "min_lr", "clip_grad")),
                 **{k: v for k, v in calls.get("OptimizerConfig", {}).items() if k not in OPTIMIZER_SKIP}}
    decay_iters = megatron_names.bridge_field("lr_decay_iters")
    scheduler = {**bridge(spec, ("lr_decay", "lr_warmup_iters", "lr_decay_iters")),
                 # Bridge's scheduler holds the weight decay it trains with: constant, the optimizer's
                 "start_weight_decay": weight_decay, "end_weight_decay": weight_decay,
                 "weight_decay_incr_style": "constant"}
    if spec.lr_decay == "constant":
        scheduler[decay_iters] = None
    train = bridge(spec, ("iters", "micro_batch", "global_batch"))
    validation = {**bridge(spec, ("eval_interval",)),
                  megatron_names.bridge_field("eval_iters"): spec.eval_iters if real else 0}  # the kit validates real data only
    if spec.eval_only or spec.iters == 0:  # validation only: the kit validates before the first step and stops
        validation[megatron_names.bridge_field("eval_only")] = True
        scheduler[decay_iters] = 1  # never stepped; Bridge asks for a decay of at least one step
    mixed = '"bf16_mixed"'  # its grad_reduce_in_fp32=True overrides the DDP config's
    if spec.grad_reduce_dtype == "bf16":
        mixed = "dataclasses.replace(bf16_mixed(), grad_reduce_in_fp32=False)"
        imports = [*imports, "import dataclasses", "from megatron.bridge.training.mixed_precision import bf16_mixed"]
    differs = notes + [n for n in lm_notes if not n.startswith(("weights:", "data: the kit's synthetic", "fp8:",
                                                                 "vocabulary:"))]
    if spec.precision == "fp8":
        differs.append("fp8: the kit's job ran its GEMMs in FP8; this recipe trains in bf16")
    differs = [n.replace("Transformer Engine's module here", "the provider's layer spec here") for n in differs]
    head = [f'"""The kit\'s job {Path(run_dir).name} as a Megatron-Bridge 0.6.2 recipe: the same model, layout,',
            "batch, schedule, optimizer, data and tokenizer, in bf16 (mixed_precision=\"bf16_mixed\").",
            "",
            f"    torchrun --nproc-per-node {spec.world_size} {names.BRIDGE_RECIPE}    # on GPUs, Megatron-Bridge installed",
            "",
            "config() builds the ConfigContainer (the kit checks it on CPU: helpers/runtime/hf/recipe_check.py)."]
    if differs:
        head += ["", "Where the kit's job differs:"] + [f"    {n}" for n in differs]
    head.append('"""')
    return "\n".join(head + [
        "import importlib",
        "",
        *sorted(set(imports)),
        "from megatron.bridge.training.config import (",
        "    CheckpointConfig,",
        "    ConfigContainer,",
        "    DistributedDataParallelConfig,",
        f"    {dataset_class},",
        "    LoggerConfig,",
        "    OptimizerConfig,",
        "    RNGConfig,",
        "    SchedulerConfig,",
        "    TokenizerConfig,",
        "    TrainingConfig,",
        "    ValidationConfig,",
        ")",
        "",
        f"WORLD_SIZE = {spec.world_size}  # GPUs: data parallel = WORLD_SIZE / (TP x PP x CP) = {spec.dp}",
        "",
        "",
        "def _named(path: str):",
        '    """A function by its import path, as the kit\'s megatron.json records it."""',
        '    module, name = path.rsplit(".", 1)',
        "    return getattr(importlib.import_module(module), name)",
        "",
        "",
        "def model():",
        provider,
        "",
        "",
        "def config() -> ConfigContainer:",
        "    return ConfigContainer(",
        "        model=model(),",
        f"        train=TrainingConfig({_call_args(train)}),",
        f"        validation=ValidationConfig({_call_args(validation)}),",
        f"        optimizer=OptimizerConfig({_call_args(optimizer)}),",
        f"        scheduler=SchedulerConfig({_call_args(scheduler)}),",
        f"        ddp=DistributedDataParallelConfig({_call_args(calls.get('DistributedDataParallelConfig', {}))}),",
        f"        dataset={dataset},",
        f"        tokenizer={_tokenizer(calls, spec)},",
        f"        checkpoint={_checkpoint(spec, run_dir)},",
        f"        logger=LoggerConfig({_call_args(megatron_names.bridge_values(spec, ('log_interval',)))}),",
        f"        rng=RNGConfig({_call_args(megatron_names.bridge_values(spec, ('seed',)))}),",
        f"        mixed_precision={mixed},",
        "    )",
        "",
        "",
        'if __name__ == "__main__":',
        "    from megatron.bridge.training.gpt_step import forward_step",
        "    from megatron.bridge.training.pretrain import pretrain",
        "",
        "    pretrain(config(), forward_step)",
        ""])


def write(run_dir: Path, calls: dict, spec) -> Path:
    path = Path(run_dir) / names.BRIDGE_RECIPE
    path.write_text(recipe(calls, spec, run_dir))
    return path


# ---- Bridge's own code on the written recipes --------------------------------------------------------
TIMEOUT_S = 600.0


def check_bridge_recipes(recipes) -> list:
    """Each (recipe path, world size): Bridge's ConfigContainer from its config(), built on CPU in a
    forked child of one fresh process, summarised as a dict (the provider's class, layer spec and
    parallel sizes; the batch sizes; dataset, tokenizer and precision), or a MegatronRefused with
    Bridge's message."""
    todo = [{"path": str(Path(p).resolve()), "world_size": int(w)} for p, w in recipes]
    out = subprocess.run([sys.executable, "-m", "helpers.runtime.hf.recipe_check"], input=json.dumps(todo),
                         capture_output=True, text=True, timeout=TIMEOUT_S, env={**os.environ, "PYTHONWARNINGS": "ignore"},
                         cwd=Path(__file__).resolve().parents[2])
    if out.returncode != 0:
        raise RuntimeError(f"the Bridge recipe check process failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return [MegatronRefused(f"Megatron-Bridge refuses {item['path']}: {r['error']}") if "error" in r else r
            for r, item in zip(json.loads(out.stdout.splitlines()[-1]), todo)]
