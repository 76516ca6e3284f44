"""Command line of the job runner: `python -m helpers [flags]` (also `python -m helpers.launch`).
Every flag comes from a JobSpec field and its one-line doc (helpers/job/spec.py, sizes.py), so
the command line can do whatever the Python API can. The last line printed is the run directory
(scripts can capture it)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from helpers.errors import InvalidJob, JobFailed
from helpers.job import models
from helpers.job.spec import JobSpec

GROUPS = [  # help sections, by field
    ("layout", ["tp", "pp", "vpp", "cp", "ep", "etp", "sp", "dist_opt", "nproc", "first_stage_layers",
                "last_stage_layers"]),
    ("model and training", ["model", "model_overrides", "hf_model", "export_hf", "iters", "micro_batch",
                            "global_batch", "seq_len", "lr", "lr_warmup_iters", "lr_decay", "lr_decay_iters",
                            "min_lr", "clip_grad", "seed", "moe_dispatcher", "backend", "attention",
                            "cross_entropy"]),
    ("activation recompute (Megatron-Core's TransformerConfig fields)",
     ["recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules"]),
    ("optimizer and data-parallel communication", ["weight_decay", "adam_beta1", "adam_beta2", "adam_eps",
                                                   "overlap_grad_reduce", "overlap_param_gather", "ddp_bucket_size",
                                                   "grad_reduce_dtype", "megatron_fsdp"]),
    ("data", ["data", "tokenizer", "data_dir", "data_column", "data_split", "eval_interval", "eval_iters"]),
    ("checkpoints", ["save_interval", "save_dir", "load_dir", "load_optimizer", "eval_only"]),
    ("where and how", ["device", "precision", "fp8_recipe", "fp8_param_gather", "fp8_output_layer", "seed_checkpoint",
                       "name", "out",
                       "tensorboard", "timeout_s", "stall_timeout_s", "collective_timeout_s", "env"]),
    ("recording and injected faults", ["log_interval", "instruments", "capture_tensors_at", "torch_profile",
                                       "torch_profile_mode", "faults"]),
]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _scalar(type_text: str):
    for t, conv in (("int", int), ("float", float)):
        if type_text.split(" | ")[0] == t:
            return conv
    return str


def _keyvalue(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _add(group, f: dataclasses.Field, default) -> None:
    meta, doc = f.metadata, f.metadata.get("doc", "")
    if f.name == "model":
        doc += f": {', '.join(models.names())}"
    flags = [_flag(f.name), *meta.get("aliases", ())]
    if f.type == "bool":
        if default:  # on by default: the flag turns it off
            group.add_argument(_flag("no_" + f.name), dest=f.name, action="store_false", help=f"turn off: {doc}")
        else:
            group.add_argument(*flags, dest=f.name, action="store_true", help=doc)
    elif meta.get("cli") == "keyvalue":
        group.add_argument(*flags, dest=f.name, type=_keyvalue, action="append", metavar="KEY=VALUE",
                           help=f"{doc} (repeat the flag for more)")
    elif "list" in f.type:
        group.add_argument(*flags, dest=f.name, nargs="+", metavar=meta.get("metavar", "PATH"), help=doc)
    else:
        shown = "" if default is None else f" (default {default})"
        group.add_argument(*flags, dest=f.name, type=_scalar(f.type), choices=meta.get("choices"),
                           default=None, help=doc + shown)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m helpers",
                                description="Run a Megatron-Core training job with torchrun "
                                            "(flags = JobSpec fields, helpers/job/spec.py).")
    by_name = {f.name: f for f in dataclasses.fields(JobSpec)}
    defaults = JobSpec()
    for title, fields in GROUPS:
        group = p.add_argument_group(title)
        for name in fields:
            _add(group, by_name[name], getattr(defaults, name))
    listed = {n for _, names in GROUPS for n in names}
    missing = [n for n, f in by_name.items() if n not in listed and f.metadata.get("cli", True) is not False]
    assert not missing, f"JobSpec fields without a command-line flag: {missing} (add them to GROUPS)"
    p.add_argument("--from-manifest", type=Path, default=None,
                   help="repeat the run recorded in a manifest.json (other flags are ignored)")
    p.add_argument("--megatron-args", metavar="FLAGS", default=None,
                   help="the job as a Megatron-LM command line (one quoted string, read by Megatron-LM's own "
                        "parser); the other flags change it (helpers/launch/from_megatron.py)")
    p.add_argument("--bridge-recipe", metavar="MODULE:FUNCTION", default=None,
                   help="the job as a Megatron-Bridge recipe, e.g. "
                        "megatron.bridge.recipes.llama.llama3:llama3_8b_pretrain_config")
    p.add_argument("--shrink", action="store_true",
                   help="run the job on CPU in the same layout with the model narrow and shallow (fewest ranks "
                        "of the layout, seq_len 64); prints what it shrank")
    p.add_argument("--plan-on", metavar="GPU", default=None,
                   help="print the memory plan of the full-size job on this GPU (python -m helpers.advisor "
                        "--list-gpus); nothing starts unless --shrink is given too")
    p.add_argument("--list-architectures", action="store_true",
                   help="print every Hugging Face architecture Megatron-Bridge maps, supported or refused and why "
                        "(the table of docs/architectures.md), then exit")
    return p


def spec_from_args(a: argparse.Namespace) -> JobSpec:
    if a.from_manifest is not None:
        if not a.from_manifest.is_file():
            sys.exit(f"error: manifest not found: {a.from_manifest}")
        recorded = json.loads(a.from_manifest.read_text())["spec"]
        return dataclasses.replace(JobSpec.from_dict(recorded).unresolved(), name=None)
    return JobSpec(**given_fields(a))


def given_fields(a: argparse.Namespace) -> dict:
    """The JobSpec fields the command line sets."""
    given = {}
    for f in dataclasses.fields(JobSpec):
        if f.metadata.get("cli", True) is False:
            continue  # no flag (internal field)
        value = getattr(a, f.name, None)
        if f.type == "bool":
            if value != getattr(JobSpec(), f.name):
                given[f.name] = value
        elif f.metadata.get("cli") == "keyvalue":
            if value:
                given[f.name] = dict(value)
        elif value is not None:
            one = isinstance(value, list) and len(value) == 1 and "str" in f.type  # load_dir: one path or several
            given[f.name] = value[0] if one else value
    return given


def main(argv=None) -> None:
    from helpers.launch.runner import run
    from helpers.rundir.report_text import text

    args = parser().parse_args(argv)
    if args.list_architectures:
        from helpers.job import architectures
        print(architectures.markdown(), end="")
        return
    spec = spec_from_args(args)
    if args.megatron_args or args.bridge_recipe or args.shrink or args.plan_on:
        from helpers.launch import from_megatron
        try:
            full, spec, lines = from_megatron.job(args.megatron_args, args.bridge_recipe, args.shrink,
                                                  spec if args.from_manifest else None, **given_fields(args))
            if args.plan_on:
                lines.append(from_megatron.plan_text(full, args.plan_on))
        except (InvalidJob, ValueError) as e:
            sys.exit(f"error: {e}")
        print("\n".join(lines), flush=True)
        if args.plan_on and not args.shrink:
            return
    try:
        result = run(spec, progress=sys.stderr.isatty())
    except (InvalidJob, JobFailed) as e:
        sys.exit(f"error: {e}")
    for m in result.metrics:
        print(f"iteration {m['iteration']:4d}  loss {m['loss']:.6f}  grad_norm {m['grad_norm']:.4f}  "
              f"step {m['step_time_s'] * 1000:.0f} ms")
    print(f"world size {result.spec.world_size} ({result.spec.layout_name()}), "
          f"final loss {result.final_loss:.6f}" if result.metrics else "no iterations run")
    if result.report:
        print(text(result.report))
    print(result.path)
