"""The two files Megatron-Bridge keeps in a checkpoint beside the tensors, made from the job:

`run_config.yaml`: the run as a ConfigContainer in Bridge's own YAML form (each object a mapping
with `_target_`, the class or function Bridge's `instantiate` rebuilds it from). What Bridge reads
back from it: `model` (load_model_config instantiates the model provider, finalizes it and builds
the model whose weights the checkpoint holds: `AutoBridge.export_ckpt` and `load_megatron_model`
go that way), `tokenizer` (load_tokenizer), `model.tensor_model_parallel_size` /
`pipeline_model_parallel_size` and `checkpoint.save_optim` / `save_rng` / `fully_parallel_save`
(a resume decides what to load), `model.hf_model_id`. The other sections (train, optimizer,
scheduler, ddp, rng) say how the job trained.

The model section is the job's own config: an imported model's Megatron-Bridge provider (with the
job's layout, precision and fused-kernel choices), a preset's TransformerConfig under Bridge's
GPTModelProvider (MLAModelProvider for multi-latent attention), plus GPTModel's arguments. The
layer spec is Megatron's local one when the job ran on it (`local_layer_spec`: the same parameter
names, TE's in the checkpoint) and Bridge's default (Transformer Engine's) on the te backend; a
model family with a layer spec of its own keeps it (Megatron-Core's decoder block spec of MoE models
with the local or TE modules, as the job ran). Values Bridge cannot rebuild (the training
loop's hooks, objects, functions outside the packages Bridge instantiates from) are left to its
defaults.

`train_state.pt`: Bridge's TrainState as its state_dict() writes it (tensors: step, consumed samples,
floating-point operations, which phases run); `latest_train_state.pt` in the checkpoint root is the
latest one's copy, Bridge's tracker."""
from __future__ import annotations

import dataclasses
import enum
import functools
import os

import torch

from helpers.job import megatron_names
from helpers.runtime.checkpoint import megatron_args

GPT_PROVIDER = "megatron.bridge.models.gpt_provider.GPTModelProvider"
MLA_PROVIDER = "megatron.bridge.models.mla_provider.MLAModelProvider"
LOCAL_SPEC = "megatron.bridge.models.gpt_provider.local_layer_spec"
DEFAULT_SPEC = "megatron.bridge.models.gpt_provider.default_layer_spec"
CONFIG = "megatron.bridge.training.config"
# What Bridge's instantiate accepts as a _target_ (megatron/bridge/utils/instantiate_utils.py)
ALLOWED = ("megatron.", "torch.", "transformers.", "numpy.")
# Config fields the training loop sets to its own functions after the model is built (train.py)
RUNTIME = {"finalize_model_grads_func", "grad_scale_func", "no_sync_func", "grad_sync_func", "param_sync_func",
           "timers"}


class Unrepresentable(Exception):
    """A value Bridge's YAML form has no spelling for (left to Bridge's default)."""


def _path(obj) -> str:
    path = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
    if "<" in path or not path.startswith(ALLOWED):
        raise Unrepresentable(path)
    return path


def yaml_value(value):
    """A config value in Bridge's YAML form: plain values as they are, dtypes and functions as
    `_target_` with `_call_: false`, enums called with their value, partials with `_partial_`."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [yaml_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): yaml_value(v) for k, v in value.items()}
    if isinstance(value, torch.dtype):
        return {"_target_": str(value), "_call_": False}
    if isinstance(value, enum.Enum):
        return {"_target_": _path(type(value)), "_call_": True, "_args_": [yaml_value(value.value)],
                "_name_": value.name}
    if isinstance(value, functools.partial):
        return {"_target_": _path(value.func), "_partial_": True, "_args_": [yaml_value(a) for a in value.args],
                **{k: yaml_value(v) for k, v in value.keywords.items()}}
    if callable(value):
        return {"_target_": _path(value), "_call_": False}
    raise Unrepresentable(type(value).__name__)


def dataclass_section(obj, target: str, skip=()) -> dict:
    """A dataclass config's init fields in Bridge's YAML form under `target`."""
    out = {"_target_": target}
    for field in dataclasses.fields(obj):
        if not field.init or field.name in skip:
            continue
        if field.name in RUNTIME:
            out[field.name] = None
            continue
        try:
            out[field.name] = yaml_value(getattr(obj, field.name))
        except Unrepresentable:
            pass  # Bridge's default
    return out


def model_section(config, spec, options: dict) -> dict:
    """The model provider: `config` (the job's TransformerConfig or Bridge provider) and GPTModel's
    arguments `options` (build.gpt_model_options), with the job's layer spec."""
    cls = type(config)
    if cls.__module__.startswith("megatron.bridge."):
        target = f"{cls.__module__}.{cls.__qualname__}"
    else:
        target = MLA_PROVIDER if getattr(config, "multi_latent_attention", False) else GPT_PROVIDER
    section = dataclass_section(config, target, skip={"transformer_layer_spec"})
    names = {f.name for f in dataclasses.fields(config)}
    gpt = {"vocab_size": options["vocab_size"], **megatron_names.bridge_values(spec, ("seq_len",)),
           "position_embedding_type": options["position_embedding_type"], "rotary_base": options["rotary_base"],
           "rotary_percent": options["rotary_percent"], "rope_scaling": options["rope_scaling"],
           "rope_scaling_factor": options["rope_scaling_factor"],
           "seq_len_interpolation_factor": options["seq_len_interpolation_factor"],
           "share_embeddings_and_output_weights": options["share_embeddings_and_output_weights"],
           "should_pad_vocab": False}  # the kit builds the vocabulary as the model gives it
    section.update({k: yaml_value(v) for k, v in gpt.items() if k in names or target in (GPT_PROVIDER, MLA_PROVIDER)})
    spec_fn = getattr(config, "transformer_layer_spec", None)
    own_spec = spec_fn is not None and f"{getattr(spec_fn, '__module__', '')}.{getattr(spec_fn, '__name__', '')}" \
        != DEFAULT_SPEC
    if spec.backend != "te" and not own_spec:
        section["transformer_layer_spec"] = {"_target_": LOCAL_SPEC, "_call_": False}
    elif own_spec:
        if isinstance(spec_fn, functools.partial) and "use_transformer_engine" in spec_fn.keywords:
            # Megatron-Core's decoder block spec (MoE models): its local or its TE modules, as the job ran
            spec_fn = functools.partial(spec_fn, use_transformer_engine=spec.backend == "te")
        try:
            section["transformer_layer_spec"] = yaml_value(spec_fn)
        except Unrepresentable:
            pass
    return section


def run_config(spec, config, model, options: dict, optimizer, ddp, save_root, tokenizer: dict) -> dict:
    """The ConfigContainer of the run: `optimizer`, `ddp`: the job's OptimizerConfig and
    DistributedDataParallelConfig (build.py); `save_root`: where its checkpoints go; `tokenizer`:
    Megatron-LM's tokenizer arguments for the run (Bridge's TokenizerConfig shares their names)."""
    tok, bridge = tokenizer, megatron_names.bridge_values
    return {
        "_target_": f"{CONFIG}.ConfigContainer",
        "model": model_section(config, spec, options),
        "train": {"_target_": f"{CONFIG}.TrainingConfig", **bridge(spec, ("micro_batch", "global_batch", "iters"))},
        "optimizer": dataclass_section(optimizer, f"{CONFIG}.OptimizerConfig"),
        "scheduler": {"_target_": f"{CONFIG}.SchedulerConfig",
                      **bridge(spec, ("lr_decay", "lr_warmup_iters", "lr_decay_iters")),
                      # Bridge's scheduler holds the weight decay it trains with: constant, the optimizer's
                      "start_weight_decay": spec.weight_decay, "end_weight_decay": spec.weight_decay,
                      "weight_decay_incr_style": "constant"},
        "ddp": dataclass_section(ddp, f"{CONFIG}.DistributedDataParallelConfig"),
        "dataset": None,
        "logger": {"_target_": f"{CONFIG}.LoggerConfig"},
        "tokenizer": {"_target_": "megatron.bridge.training.tokenizers.config.TokenizerConfig", **tok},
        "checkpoint": {"_target_": f"{CONFIG}.CheckpointConfig",
                       megatron_names.bridge_field("save_dir"): os.path.abspath(save_root),
                       **bridge(spec, ("save_interval",)), "ckpt_format": "torch_dist", "async_save": False,
                       "save_optim": True, "save_rng": spec.device == "cuda",  # megatron_args.py says why
                       "fully_parallel_save": False, "dist_ckpt_optim_fully_reshardable": spec.dist_opt},
        "rng": {"_target_": "megatron.training.config.common_config.RNGConfig", **bridge(spec, ("seed",))},
        "dist": None,
        "mixed_precision": None,
    }


def train_state(spec, model, iteration: int) -> dict[str, torch.Tensor]:
    """Bridge's TrainState.state_dict() at `iteration` (megatron/bridge/training/state.py)."""
    real_data = spec.data != "synthetic"
    return {
        "step": torch.tensor(iteration, dtype=torch.int64),
        "consumed_train_samples": torch.tensor(iteration * spec.global_batch_size, dtype=torch.int64),
        "skipped_train_samples": torch.tensor(0, dtype=torch.int64),
        "consumed_valid_samples": torch.tensor(0, dtype=torch.int64),
        "floating_point_operations_so_far": torch.tensor(
            megatron_args.floating_point_operations(spec, model, iteration), dtype=torch.float64),
        "do_train": torch.tensor(True, dtype=torch.bool),
        "do_valid": torch.tensor(real_data, dtype=torch.bool),
        "do_test": torch.tensor(real_data, dtype=torch.bool),
    }
