"""The kit's public surface. Notebook side:

    import helpers
    run = helpers.run(tp=2, nproc=4, iters=5)          # a RunDir: .losses, .groups, .ranks, .report
    helpers.Layout(tp=2, pp=2, nproc=8).check(helpers.preset("tiny-gpt"))
    helpers.plan_memory(helpers.preset("llama3-8b"), helpers.Layout(tp=8, nproc=8, seq_len=8192))

Packages (the folder says where code runs; docs/architecture.md draws the whole):
    job/      what a job is: plain data both sides import (sizes, spec, layout, rules, models, data)
    rundir/   the run directory: the one contract between the two sides
    launch/   notebook side, processes: prepare, torchrun, watch, multi-node, command line
    memory/   notebook side, prediction: the memory planner
    views/    notebook side, pictures and tables (the only package that imports matplotlib/ipywidgets)
    perf/     notebook side, prediction: the performance model (GPUs, links, collectives, GEMMs, layouts)
    advisor/  notebook side, prediction: every layout of a model on N GPUs, ranked
    lessons/  a lesson run headless (papermill in a child process)
    precision/ number formats, FP8 recipes and GEMMs (both sides)
    runtime/  inside torchrun only: the Megatron-Core worker
Names are loaded on first use, so a worker that imports helpers.runtime.* loads none of the
notebook-side packages."""
from __future__ import annotations

import importlib

_PUBLIC = {
    "run": "helpers.launch.runner", "simulate": "helpers.launch.multinode", "JobSpec": "helpers.job.spec",
    "Layout": "helpers.job.layout", "RunDir": "helpers.rundir.reader", "preset": "helpers.job.models",
    "plan_memory": "helpers.memory.plan", "Training": "helpers.memory.training", "errors": "helpers.errors",
    "KitError": "helpers.errors", "InvalidJob": "helpers.errors", "InvalidLayout": "helpers.errors",
    "CheckpointError": "helpers.errors", "DataNotFound": "helpers.errors", "JobFailed": "helpers.errors",
    "JobTimeout": "helpers.errors", "PreflightError": "helpers.errors",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'helpers' has no attribute {name!r}")
    module = importlib.import_module(_PUBLIC[name])
    return module if name == "errors" else getattr(module, name)


def __dir__():
    return __all__
