"""What a run asked of Megatron, beside what the learner asked of the kit: the kit's arguments, the
Megatron-Core calls the workers made with those values (read from the run directory's
megatron.json, written by the workers themselves), the same job as Megatron-LM's command (the run
directory's megatron-lm.sh, checked here with Megatron-LM's own parse_args + validate_args), and one
rank's modules with their local shapes, each marked Megatron-Core's own or the kit's substitute.

    megatron_calls.show(run)          # in a notebook: the three panels as HTML
    print(megatron_calls.code(run))   # the Megatron-Core calls as Python
"""
from __future__ import annotations

import dataclasses
import html
import inspect
import re

from helpers.errors import MegatronRefused
from helpers.job.spec import JobSpec
from helpers.rundir import megatron_lm, megatron_lm_check, names

# TransformerConfig fields Megatron fills in itself or that only say "the defaults of this build"
# (init methods from init_method_std, dtypes, CUDA-graph and recompute lists): left out of the code view.
NOISE = {"autocast_dtype", "pipeline_dtype", "init_method", "output_layer_init_method", "embedding_init_method",
         "embedding_init_method_std", "microbatch_group_size_per_vp_stage", "recompute_modules",
         "cuda_graph_modules", "inference_cuda_graph_scope"}
# The kit's own bookkeeping fields: not part of what was asked of the model or the layout.
KIT_ONLY = {"out", "name", "env", "progress", "timeout_s", "stall_timeout_s", "collective_timeout_s", "data_dir"}


def kit_arguments(run) -> dict:
    """The JobSpec fields of the run that differ from JobSpec's defaults (what the learner passed,
    plus what `auto` resolved to)."""
    spec, out = run.spec, {}
    for field in dataclasses.fields(JobSpec):
        default = field.default if field.default is not dataclasses.MISSING else (
            field.default_factory() if field.default_factory is not dataclasses.MISSING else None)
        value = getattr(spec, field.name)
        if field.name not in KIT_ONLY and value != default:
            out[field.name] = value
    return out


def _call(name: str, kwargs: dict, indent: str = "    ") -> str:
    if not kwargs:
        return f"{name}()"
    body = ",\n".join(f"{indent}{k}={v!r}" for k, v in kwargs.items())
    return f"{name}(\n{body},\n)"


def _non_default_args(function, values: dict) -> dict:
    defaults = {k: p.default for k, p in inspect.signature(function).parameters.items()}
    return {k: v for k, v in values.items() if defaults.get(k, inspect.Parameter.empty) != v}


def code(run) -> str:
    """The run's Megatron-Core calls as Python, with the values this job used (defaults left out)."""
    from megatron.core import parallel_state

    calls = run.megatron
    fields = {k: v for k, v in calls["TransformerConfig"]["fields"].items() if k not in NOISE}
    config_class = calls["TransformerConfig"]["class"].rsplit(".", 1)[-1]
    model = calls["model"][0]
    model_class = model["class"].rsplit(".", 1)[-1]
    model_kwargs = {k: v for k, v in model.items() if k not in ("class", "pre_process", "post_process", "vp_stage")}
    parts = [
        "from megatron.core import parallel_state",
        "parallel_state." + _call("initialize_model_parallel",
                                  _non_default_args(parallel_state.initialize_model_parallel,
                                                    calls["initialize_model_parallel"])),
        "config = " + _call(config_class, fields),
        f"model = [{model_class}(config, layer_spec, pre_process=..., post_process=..., vp_stage=..., "
        + ", ".join(f"{k}={v!r}" for k, v in model_kwargs.items()) + f")]  # {len(calls['model'])} chunk(s) here",
        "ddp_config = " + _call("DistributedDataParallelConfig", calls["DistributedDataParallelConfig"]),
        "model = [DistributedDataParallel(config, ddp_config, chunk) for chunk in model]",
        "optimizer = get_megatron_optimizer(" + _call("OptimizerConfig", calls["OptimizerConfig"]) + ", model)",
        f"forward_backward = get_forward_backward_func()  # -> {calls['get_forward_backward_func']}",
    ]
    return "\n".join(parts)


def launch_line(run) -> str:
    """Megatron-LM's command for the same job: the run directory's megatron-lm.sh (made from
    megatron.json when the run has none)."""
    path = run.path / names.MEGATRON_LM_SCRIPT
    return path.read_text() if path.exists() else megatron_lm.script(run.megatron, run.spec, run.path)


def verdict(run) -> str:
    """What Megatron-LM's own parse_args + validate_args say of the command, in one line."""
    try:
        args = megatron_lm_check.check_megatron_lm_command(launch_line(run), run.spec.world_size)
    except MegatronRefused as e:
        return f"REFUSED by Megatron-LM: {str(e).splitlines()[0]}"
    return (f"accepted by Megatron-LM's parse_args + validate_args at world size {args.world_size}: "
            f"TP={args.tensor_model_parallel_size} PP={args.pipeline_model_parallel_size} "
            f"CP={args.context_parallel_size} EP={args.expert_model_parallel_size} DP={args.data_parallel_size}, "
            f"micro batch {args.micro_batch_size}, global batch {args.global_batch_size}")


def origin(row: dict) -> str:
    module = row["module"]
    if module.startswith("helpers.") or row.get("substitute"):
        return "kit substitute"
    if module.startswith("megatron."):
        return "Megatron-Core"
    return module.split(".")[0]


def module_rows(run, rank: int = 0, layers: int = 1, hide: tuple[str, ...] = ()) -> list[dict]:
    """One rank's modules with parameters; of the transformer layers only the first `layers`
    (the others repeat them). A module whose name contains one of `hide` is listed without its
    shapes (a lesson's exercise asks one of them later)."""
    rows = []
    for row in run.megatron["modules"][str(rank)]:
        m = re.search(r"layers\.(\d+)\.", row["name"])
        if m and int(m.group(1)) >= layers:
            continue
        rows.append({**row, "origin": origin(row), "hidden": any(h in row["name"] for h in hide)})
    return rows


def shapes(row: dict) -> str:
    if row["hidden"]:
        return "(an exercise below asks it)"
    return ", ".join(f"{k} {tuple(v)}" for k, v in row["params"].items())


def text(run, rank: int = 0, hide: tuple[str, ...] = ()) -> str:
    rows = module_rows(run, rank, hide=hide)
    tree = "\n".join(f"  {r['name']:<46} {r['class']:<28} {r['origin']:<15} " + shapes(r) for r in rows)
    return (f"the kit: launch.run({', '.join(f'{k}={v!r}' for k, v in kit_arguments(run).items())})\n\n"
            f"Megatron-Core:\n{code(run)}\n\nMegatron-LM ({names.MEGATRON_LM_SCRIPT}; {verdict(run)}):\n"
            f"{launch_line(run)}\n\nrank {rank}'s modules:\n{tree}")


def show(run, rank: int = 0, hide: tuple[str, ...] = ()):
    """The kit's arguments, Megatron-Core's calls and Megatron-LM's command (checked by Megatron-LM's
    own argument checks) side by side, then one rank's modules (kit substitutes highlighted; the
    shapes of modules named by `hide` left out). HTML in a notebook, text elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display
        in_notebook = get_ipython() is not None
    except ImportError:
        in_notebook = False
    if not in_notebook:
        print(text(run, rank, hide))
        return
    kit = "launch.run(\n" + "".join(f"    {k}={v!r},\n" for k, v in kit_arguments(run).items()) + ")"
    pre = 'style="font-size:11px;margin:0;white-space:pre"'
    cells = [("you asked the kit", kit), ("the workers asked Megatron-Core", code(run)),
             (f"Megatron-LM, the same job ({names.MEGATRON_LM_SCRIPT})", launch_line(run))]
    head = "".join(f"<th style='text-align:left'>{html.escape(t)}</th>" for t, _ in cells)
    body = "".join(f"<td style='vertical-align:top'><pre {pre}>{html.escape(c)}</pre></td>" for _, c in cells)
    rows = "".join(
        f"<tr style='background:{'#fff3cd' if r['origin'] == 'kit substitute' else 'none'}'>"
        f"<td><code>{html.escape(r['name'])}</code></td><td>{html.escape(r['class'])}</td>"
        f"<td>{html.escape(r.get('substitute') or r['origin'])}</td>"
        f"<td>{html.escape(shapes(r))}</td></tr>"
        for r in module_rows(run, rank, hide=hide))
    display(HTML(f"<table><tr>{head}</tr><tr>{body}</tr></table>"
                 f"<p><b>{names.MEGATRON_LM_SCRIPT}</b>: {html.escape(verdict(run))}; the same job as a "
                 f"Megatron-Bridge recipe: <code>{names.BRIDGE_RECIPE}</code> in the run directory</p>"
                 f"<p><b>rank {rank}'s modules</b> (layer 0 shown; the other layers repeat it; "
                 f"yellow: the kit's substitute for a Transformer Engine module)</p>"
                 f"<table><tr><th>module</th><th>class</th><th>from</th><th>local shapes</th></tr>{rows}</table>"))
