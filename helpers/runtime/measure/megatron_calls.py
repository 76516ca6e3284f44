"""What the job asked of Megatron-Core, written to the run directory's megatron.json by rank 0:
the arguments of `initialize_model_parallel`, the fields of TransformerConfig, of
DistributedDataParallelConfig and of OptimizerConfig that differ from Megatron's defaults, the
model class and its constructor arguments, the schedule `get_forward_backward_func` returned, the
batch sizes, and every rank's module tree (Megatron's class names and the local shapes). A learner
reads the kit's flags next to Megatron's own arguments (helpers/views/megatron_calls.py), and
helpers/rundir/megatron_flags.py turns the record into Megatron-LM's command-line flags."""
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
    rows = []
    for i, chunk in enumerate(model):
        inner = unwrap(chunk)
        for name, module in inner.named_modules():
            params = {n: list(p.shape) for n, p in module.named_parameters(recurse=False)}
            if params or type(module).__module__.startswith("helpers."):  # kit modules even without weights
                rows.append({"chunk": i, "name": name, "class": type(module).__name__,
                             "module": type(module).__module__, "params": params,
                             # the kit's factories that return a torch module say what they stand in for
                             **({"substitute": module.kit_substitute} if hasattr(module, "kit_substitute") else {})})
    return rows


def unwrap(chunk):
    """The GPTModel/HybridModel inside Megatron's DDP and Float16Module wrappers."""
    while hasattr(chunk, "module"):
        chunk = chunk.module
    return chunk


def record(worker) -> dict:
    """Rank 0's record of the job's calls (not the module trees, which every rank adds)."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    from helpers.runtime.setup import collective_timeout_s, parallel_args

    spec, model, opt = worker.spec, worker.model, worker.opt
    schedule = get_forward_backward_func()
    return {
        "initialize_model_parallel": jsonable(parallel_args(spec, collective_timeout_s(spec))),
        "TransformerConfig": {"class": f"{type(worker.config).__module__}.{type(worker.config).__name__}",
                              "fields": non_defaults(worker.config)},
        "model": [model_record(unwrap(chunk)) for chunk in model],
        "transformer_impl": "transformer_engine" if spec.backend == "te" else "local",
        "DistributedDataParallelConfig": non_defaults(model[0].ddp_config),
        "OptimizerConfig": non_defaults(opt.config) if getattr(opt, "config", None) is not None else {},
        "get_forward_backward_func": schedule.__name__,
        "batch": {"micro_batch_size": spec.micro_batch, "global_batch_size": spec.global_batch_size,
                  "seq_length": spec.seq_len, "train_iters": spec.iters, "lr": spec.lr, "min_lr": spec.min_lr,
                  "lr_warmup_iters": spec.lr_warmup_iters, "lr_decay_style": spec.lr_decay,
                  "seed": spec.seed},
    }


def write(path, calls: dict, trees: list[list[dict]]) -> None:
    from helpers.rundir.writer import write_json
    write_json(path, {**calls, "modules": {str(rank): rows for rank, rows in enumerate(trees)}})

