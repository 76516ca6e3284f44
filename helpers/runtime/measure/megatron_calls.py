"""What the job asked of Megatron-Core, written to the run directory's megatron.json by rank 0:
the arguments of `initialize_model_parallel`, the fields of TransformerConfig, of
DistributedDataParallelConfig and of OptimizerConfig that differ from Megatron's defaults, the
model class and its constructor arguments, the schedule `get_forward_backward_func` returned, the
batch sizes, and every rank's module tree (Megatron's class names and the local shapes). A learner
reads the kit's flags next to Megatron's own arguments (helpers/views/megatron_calls.py), and
helpers/rundir/megatron_flags.py turns the record into Megatron-LM's command-line flags.

With megatron.json rank 0 writes the same job for the two tools users run on GPU clusters:
megatron-lm.sh (helpers/rundir/megatron_lm.py) and bridge_recipe.py (helpers/rundir/bridge_recipe.py),
from the record plus `data`: the indexed datasets and the tokenizer the job read. `planned(spec)`
makes the same record without starting the job (no process groups, no model), so a layout can be
written out, and checked, for machines it never ran on."""
from __future__ import annotations

import dataclasses
import enum
import functools

import torch


def jsonable(value):
    """A config value as JSON: numbers, strings, lists as they are; dtypes, enums and functions by
    name; anything else by its repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, functools.partial):  # e.g. init_method = partial(normal_, mean=0.0, std=0.02)
        args = [repr(a) for a in value.args] + [f"{k}={v!r}" for k, v in value.keywords.items()]
        return f"{jsonable(value.func)}({', '.join(args)})"
    if callable(value):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', repr(value))}".lstrip(".")
    return repr(value)


# Config fields the training loop sets to its own functions after the model is built (train.py).
LOOP_HOOKS = {"finalize_model_grads_func", "grad_scale_func", "no_sync_func", "grad_sync_func", "param_sync_func"}


def _default(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def non_defaults(config) -> dict:
    """The dataclass fields of `config` whose value differs from the class's declared default
    (fields without a default, like num_layers, always). Values derived in __post_init__ (e.g.
    ffn_hidden_size = 4 x hidden_size when not given) differ from a None default and are listed."""
    out = {}
    for field in dataclasses.fields(config):
        if not field.init:
            continue
        value, default = getattr(config, field.name, None), _default(field)
        try:
            same = default is not dataclasses.MISSING and bool(value == default)
        except Exception:  # tensors, objects without a plain equality
            same = False
        if not same and field.name not in LOOP_HOOKS:
            out[field.name] = jsonable(value)
    return out


def model_record(chunk) -> dict:
    """The model class Megatron builds and the constructor arguments that are not config fields."""
    names = ("vocab_size", "max_sequence_length", "position_embedding_type", "rotary_percent", "rotary_base",
             "share_embeddings_and_output_weights", "pre_process", "post_process", "vp_stage")
    return {"class": f"{type(chunk).__module__}.{type(chunk).__name__}",
            **{n: jsonable(getattr(chunk, n)) for n in names if hasattr(chunk, n)}}


def module_tree(model: list) -> list[dict]:
    """This rank's modules that hold parameters (and the kit's own modules), per model chunk: the
    module's name, its class (module path included: `megatron.core...` is Megatron's own, `helpers.runtime...` a kit
    substitute) and the local shape of each parameter it holds directly."""
    from megatron.core.utils import unwrap_model

    rows = []
    for i, inner in enumerate(unwrap_model(model)):
        for name, module in inner.named_modules():
            params = {n: list(p.shape) for n, p in module.named_parameters(recurse=False)}
            if params or type(module).__module__.startswith("helpers."):  # kit modules even without weights
                rows.append({"chunk": i, "name": name, "class": type(module).__name__,
                             "module": type(module).__module__, "params": params,
                             # the kit's factories that return a torch module say what they stand in for
                             **({"substitute": module.kit_substitute} if hasattr(module, "kit_substitute") else {})})
    return rows


def record(spec, trainee, prepared) -> dict:
    """Rank 0's record of the job's calls (not the module trees, which every rank adds): the
    trainee's config, chunks, DDP and optimizer (runtime/worker.py), and the real data prepared on
    this node (data/indexed.Prepared; None: synthetic)."""
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.utils import unwrap_model

    model, opt = trainee.model, trainee.optimizer
    return calls_record(spec, trainee.config, [model_record(inner) for inner in unwrap_model(model)],
                        model[0].ddp_config, getattr(opt, "config", None), get_forward_backward_func().__name__,
                        data_record(spec, prepared))


def calls_record(spec, config, chunks: list[dict], ddp_config, optimizer_config, schedule: str, data: dict) -> dict:
    """The record from the objects the job built (or would build: `planned`)."""
    from helpers.job import megatron_names
    from helpers.runtime.setup import collective_timeout_s, parallel_args

    return {
        "initialize_model_parallel": jsonable(parallel_args(spec, collective_timeout_s(spec))),
        "TransformerConfig": {"class": f"{type(config).__module__}.{type(config).__name__}",
                              "fields": non_defaults(config)},
        "model": chunks,
        "transformer_impl": megatron_names.of_kit("backend").megatron_value(spec),
        "DistributedDataParallelConfig": non_defaults(ddp_config),
        "OptimizerConfig": non_defaults(optimizer_config) if optimizer_config is not None else {},
        "get_forward_backward_func": schedule,
        "batch": megatron_names.core_values(spec, megatron_names.BATCH),
        "data": data,
    }


def data_record(spec, prepared) -> dict:
    """What another tool needs to read the same data: the kind of data, the indexed datasets by role
    (a split's, "all" with Megatron's split weights, or the user's own prefix) and the tokenizer
    (its name, vocabulary, and its files or folder). Synthetic data: the kind and the vocabulary."""
    from pathlib import Path

    from helpers.job.data import tokenizers

    if prepared is None:
        return {"kind": "synthetic"}
    src = prepared.src
    files = tokenizers.files(spec.tokenizer, Path(src.tokenizer_dir) if src.tokenizer_dir else None)
    return {"kind": src.kind, "prefixes": prepared.prefixes(), "split": src.split,
            "tokenizer": {"name": spec.tokenizer, "vocab_size": prepared.tokenizer.vocab_size,
                          "files": {k: str(v) for k, v in files.items()},
                          "folder": spec.hf_model if spec.tokenizer == "hf" else None}}


def schedule_name(spec) -> str:
    """The schedule Megatron's get_forward_backward_func returns for this layout."""
    if spec.pp == 1:
        return "forward_backward_no_pipelining"
    return "forward_backward_pipelining_with_interleaving" if spec.vpp else \
        "forward_backward_pipelining_without_interleaving"


def planned(spec) -> dict:
    """The record (without module trees) a job of this resolved spec writes, made in this process
    without starting it: the config as the worker builds it (a preset's, or Megatron-Bridge's
    provider for an HF folder), GPTModel's arguments for rank 0's chunks, the DDP and optimizer
    configs, the schedule, and real data tokenized into the kit's cache as the job's node would."""
    from helpers.job import data
    from helpers.runtime import build

    on_cpu = spec.device == "cpu"
    model = spec.model_preset()
    if spec.hf_model:
        from helpers.job import hf_model
        from helpers.runtime.hf import config as hf_config
        bridge = hf_config.open_bridge(hf_model.read(spec.hf_model).record())
        config = hf_config.provider_config(bridge, spec, on_cpu, spec.bf16)
    else:
        config = build.transformer_config(model, spec, on_cpu, spec.bf16)
    options = jsonable(build.gpt_model_options(config, model, spec.seq_len))
    model_class = "megatron.core.models.hybrid.hybrid_model.HybridModel" \
        if getattr(config, "hybrid_layer_pattern", None) else "megatron.core.models.gpt.gpt_model.GPTModel"
    chunks = [{"class": model_class, **{k: v for k, v in options.items() if not k.startswith("rope_scaling")
                                         and k != "seq_len_interpolation_factor"},
               "pre_process": i == 0, "post_process": spec.pp == 1 and i == (spec.vpp or 1) - 1,
               "vp_stage": i if spec.vpp else None} for i in range(spec.vpp or 1)]
    prepared = None
    if spec.data != "synthetic":
        from helpers.runtime.data.indexed import Prepared
        prepared = Prepared(spec, data.pin(data.resolve(spec)))
        prepared.ensure_tokenized()
    return calls_record(spec, config, chunks, build.ddp_config(spec), build.optimizer_config(config, spec),
                        schedule_name(spec), data_record(spec, prepared))


def write(path, calls: dict, trees: list[list[dict]]) -> None:
    """megatron.json, then the same job for Megatron-LM (megatron-lm.sh) and Megatron-Bridge
    (bridge_recipe.py) next to it."""
    from pathlib import Path

    from helpers.job.spec import JobSpec
    from helpers.rundir import bridge_recipe, megatron_lm, names
    from helpers.rundir.writer import write_json

    write_json(path, {**calls, "modules": {str(rank): rows for rank, rows in enumerate(trees)}})
    run_dir = Path(path).parent
    spec = JobSpec.read(run_dir / names.SPEC)
    calls = {**calls, "modules": {"0": trees[0]}}  # rank 0's modules name the kit's substitutes
    megatron_lm.write(run_dir, calls, spec)
    bridge_recipe.write(run_dir, calls, spec)

