"""Fields with limits of their own: every field with a fixed set of values (or none, where none is
its default; the command line refuses others itself, the Python API comes here), counts that must
be positive, a GPU that is there, a model preset that exists. Category "job"."""
from __future__ import annotations

import dataclasses

from helpers.job.rules.environment import Environment
from helpers.job.violation import Found, Violation


def check(spec, env: Environment) -> list[Violation]:
    v = Found("job")
    for f in dataclasses.fields(spec):
        choices = f.metadata.get("choices")
        unset = f.default is None and getattr(spec, f.name) is None  # an optional choice left at none
        if choices and not unset and getattr(spec, f.name) not in choices:
            named = ", ".join(map(str, choices)) + (" or none" if f.default is None else "")
            v.add(f"{f.name}_choice", f"{f.name} must be one of {named}, not {getattr(spec, f.name)!r}",
                  f"pick one of {named}")
    if spec.nproc is not None and spec.nproc < 1:
        v.add("nproc_positive", f"nproc must be >= 1, not {spec.nproc}", "use at least one process")
    if spec.iters < 0:
        v.add("iters_not_negative", f"iters must be >= 0, not {spec.iters}", "use 0 (evaluate/export only) or more")
    if spec.device == "cuda" and env.cuda_devices == 0:
        v.add("no_cuda_device", "device=cuda but no CUDA device is visible", "use device='cpu' or 'auto'")
    if spec.tensorboard == "on" and not env.tensorboard_installed:
        v.add("tensorboard_not_installed", "tensorboard='on' but the tensorboard package is not installed",
              "pip install tensorboard (pyproject.toml lists it), or tensorboard='off'")
    return v


def model_of(spec, folder=None) -> tuple[object | None, list[Violation]]:
    """(the model the job trains, []) or (None, [why not]): a preset with its overrides, or the
    description of the HF folder `folder` (hf_model.read(spec.hf_model); an unusable folder is
    rules/hf.py's to report)."""
    from helpers.job import hf_model

    v = Found("job")
    if spec.hf_model:
        folder = folder or hf_model.read(spec.hf_model)
        return (None if folder.problems else hf_model.describe(spec.hf_model, folder.config)), v
    try:
        return spec.model_preset(), v
    except KeyError as e:
        v.add("unknown_model", str(e.args[0]), "pick a preset of helpers.job.models.names(), or hf_model=FOLDER")
    except TypeError as e:
        v.add("unknown_model_field", f"model_overrides: {e}", "use fields of helpers.job.models.ModelPreset")
    return None, v
