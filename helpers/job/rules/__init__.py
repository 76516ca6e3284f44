"""Every check that can run before a process starts, each a named Violation with the numbers
involved and a fix, run through one entry that reports them all at once, for the command line and
the Python API alike:

    resolved = rules.resolve(spec, env)    # every `auto` decided; the model, data and seed checkpoint
                                           # worked out once (resolve.py): .spec, .model, .data, .hf
    checked = rules.check(resolved, env)   # .model, .violations; .refuse() raises one InvalidJob

  violation.py    Violation (name, message, fix, category)
  environment.py  Environment: what the machine offers (GPUs, FP8 recipes, TE), probed by the launcher
  resolve.py      device, precision, backend, attention, tokenizer, tensorboard: auto -> what the workers
                  build; Resolved: the spec, its model, the HF folder and the data source, each read once
  fields.py       fields with choices and limits; the model preset (category job)
  layout.py       the parallel sizes against the model and each other (world, tensor, sequence,
                  pipeline, experts, context, batch); `validate` runs them and builder.layout
  builder.py      what the chosen backend builds (backend)
  precision.py    FP8 on this machine and these shapes (precision)
  schedule.py     the learning-rate schedule (schedule)
  checkpoint.py   save/load/eval fields; every checkpoint to load verified on disk (checkpoint)
  data.py         the data source, SFT examples, tokenizer vs vocabulary (data)
  hf.py           the Hugging Face folder and export (hf)
  debug.py        log interval, captured tensors, profiler window, injected faults (debug)
  optimizer.py    Adam's betas and eps, weight decay, the data-parallel overlap and buckets (optimizer)
  recompute.py    activation recompute: Megatron's combinations, the modules the backend builds (recompute)
What only a running job can see (a node reading different files, a NaN) stays in the worker."""
from __future__ import annotations

from dataclasses import dataclass

from helpers.errors import InvalidJob
from helpers.job.models import ModelPreset
from helpers.job.sizes import PlacedSizes
from helpers.job.rules import (builder, checkpoint, data, debug, fields, hf, layout, optimizer, precision, recompute,
                               schedule)
from helpers.job.rules.environment import CPU_ONLY, Environment
from helpers.job.rules.resolve import Resolved, resolve
from helpers.job.violation import Violation

__all__ = ["check", "resolve", "Resolved", "Checked", "Environment", "CPU_ONLY", "Violation"]


@dataclass(frozen=True)
class Checked:
    """What `check` found: the model it checked against (None when the model itself is a problem)
    and every violation."""
    model: ModelPreset | None
    violations: tuple[Violation, ...]

    def refuse(self) -> None:
        """Raise one InvalidJob listing every violation (none: return)."""
        if self.violations:
            lines = "\n".join(f"  - {v}" for v in self.violations)
            raise InvalidJob(f"the job cannot run ({len(self.violations)} problem(s)):\n{lines}", list(self.violations))


def check(resolved: Resolved, env: Environment = CPU_ONLY) -> Checked:
    """Every rule against a resolved job (`resolve(spec, env)`) on this environment. Reads nothing
    resolve read: the model, the HF folder and the data source come from `resolved`."""
    if not isinstance(resolved, Resolved):
        raise TypeError(f"rules.check takes rules.resolve(spec, env), not a {type(resolved).__name__}")
    spec, model = resolved.spec, resolved.model
    found = fields.check(spec, env) + schedule.check(spec) + hf.check(spec, resolved.hf)
    found += list(resolved.model_problems)
    if model is not None:
        devices = env.cuda_devices if spec.device == "cuda" else None
        placed = PlacedSizes.of(spec, backend=spec.backend if spec.backend in ("local", "te") else "local")
        found += layout.validate(placed, model, devices)
        found += builder.job(spec, model, env) + precision.check(spec, model, env)
    found += recompute.check(spec, model, env)
    found += checkpoint.check(spec, model) + data.check(spec, model, resolved.data, resolved.data_error)
    found += debug.check(spec)
    found += optimizer.check(spec)
    return Checked(model, tuple(found))
