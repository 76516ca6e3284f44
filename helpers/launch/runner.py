"""The job runner: JobSpec -> every auto decided, the model, data source and seed checkpoint worked
out once, every rule checked (helpers/job/rules/) -> seed checkpoint (cached) -> run directory
(spec.json, model.json, data.json, manifest.json) -> torchrun -> RunDir. The spec the rules checked
is the one spec.json holds: nothing is decided after the check.

`prepare` is everything before the processes start; `run` (one node), the multi-node simulation
and `python -m helpers.launch.multinode prepare` (real nodes) all go through it, so they check and
record the same things. Failures end in one exception (helpers/errors.py): `InvalidJob` before
anything starts (listing every problem), `JobFailed` (naming the failing ranks with their last log
lines) or `JobTimeout` after; the whole process group of the job is killed either way, so no worker
outlives a failed job."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import warnings
from datetime import datetime
from pathlib import Path

from helpers.job import checkpoint_dir, data, paths, rules
from helpers.job.models import ModelPreset
from helpers.job.spec import JobSpec
from helpers.launch import environment, torchrun
from helpers.rundir import names, prepared
from helpers.rundir.reader import RunDir


# ---- deciding and checking ---------------------------------------------------------------------
def check(spec: JobSpec, env: rules.Environment | None = None, seed_path: str | None = None,
          folders: dict | None = None) -> tuple[rules.Resolved, rules.Checked]:
    """The job worked out for this machine (rules.Resolved: `.spec` with every auto decided, `.model`,
    `.data`, `.hf`) and what the rules found. Starts nothing. `seed_path`, `folders`: rules.resolve's."""
    env = env or environment.probe(spec.device)
    resolved = rules.resolve(spec, env, seed_path, folders)
    return resolved, rules.check(resolved, env)


def checked(spec: JobSpec, env: rules.Environment | None = None, seed_path: str | None = None,
            folders: dict | None = None) -> rules.Resolved:
    """The job worked out (`check`), or InvalidJob listing every problem (`.violations`, `.names`)."""
    resolved, found = check(spec, env, seed_path, folders)
    found.refuse()
    return resolved


def validate(spec: JobSpec, env: rules.Environment | None = None) -> JobSpec:
    """The resolved spec, or InvalidJob listing every problem (`.violations`, `.names`)."""
    return checked(spec, env).spec


# ---- what a run directory records ---------------------------------------------------------------
def git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(paths.REPO_ROOT), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except Exception:
        return None


def new_run_dir(spec: JobSpec, model: ModelPreset) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    name = spec.name or f"{model.name}-{spec.layout_name()}"
    path = Path(spec.out) / f"{name}-{stamp}"
    (path / names.LOGS).mkdir(parents=True)
    return path


def write_run_files(run_dir: Path, resolved: rules.Resolved, others: list[rules.Resolved] = ()) -> None:
    """spec.json, model.json and data.json: the job as checked, for the workers to build (`others`:
    the other HF folders an HF parity job's layouts name)."""
    resolved.spec.write(run_dir / names.SPEC)
    prepared.write_model(run_dir, [(r.model, r.hf.record() if r.hf else None) for r in (resolved, *others)])
    prepared.write_data(run_dir, resolved.data)


def write_manifest(run_dir: Path, resolved: rules.Resolved, data_record: dict | None) -> None:
    spec = resolved.spec
    (run_dir / names.MANIFEST).write_text(json.dumps({
        "spec": spec.to_dict(),
        "layout": spec.layout_record(),
        "model": resolved.model.to_dict(),
        "data": data_record or {"kind": "synthetic", "source": "helpers/runtime/data/synthetic.py"},
        # the imported folder: name, config hash, architectures (Bridge version: versions)
        "hf_model": resolved.hf.record() if resolved.hf else None,
        "versions": environment.versions(),
        "git_revision": git_revision(),
        "command": torchrun.command(run_dir, spec),
        "repeat": f"python -m helpers --from-manifest {run_dir / names.MANIFEST}",
        "created": datetime.now().isoformat(timespec="seconds"),
    }, indent=2))


# ---- the seed checkpoint -------------------------------------------------------------------------
def seed_checkpoint(spec: JobSpec, model: ModelPreset) -> Path:
    """The cached world-size-1 checkpoint for this model, seed and precision (checkpoint_dir.seed_path,
    the folder a resolved spec names in seed_checkpoint_dir); built on first use. `spec` is resolved."""
    path = checkpoint_dir.seed_path(spec, model)
    if (path / checkpoint_dir.SEED_MARKER).exists():
        return path
    seed_spec = dataclasses.replace(spec, **JobSpec.per_run_defaults(), precision=checkpoint_dir.seed_weights(spec),
                                    nproc=1, iters=0, seed_checkpoint=False, seed_checkpoint_dir=None,
                                    name=f"seed-{model.name}", out=str(paths.cache_dir() / "seed-runs"))
    run_dir = new_run_dir(seed_spec, model)
    seed_spec.write(run_dir / names.SPEC)
    prepared.write_model(run_dir, [(model, None)])
    execute(run_dir, seed_spec, ["--seed-checkpoint-out", str(path)], progress=False)
    return path


# ---- running ---------------------------------------------------------------------------------
def prepare(spec: JobSpec, seed_path: str | None = None) -> tuple[JobSpec, Path]:
    """Work out and check the job (`checked`: every auto decided, the model, the data source pinned so
    a rerun from the manifest reads the same bytes, the seed checkpoint named in seed_checkpoint_dir), build the
    seed checkpoint it names on first use, write the run directory: spec.json (the spec the rules
    checked, as it was), model.json, data.json, manifest.json. Nothing runs yet. `seed_path`
    overrides where workers find the seed checkpoint (e.g. "$KIT_NODE_DIR/seed-checkpoint" for
    node-local copies, which the caller fills)."""
    env = environment.probe(spec.device)
    resolved = checked(spec, env, seed_path)
    spec, model = resolved.spec, resolved.model
    if spec.device == "cuda":  # the memory plan: warn, do not refuse (a plan can be wrong)
        from helpers.memory.fit import warn_if_over_device
        warn_if_over_device(spec, model, env.device_memory_bytes)
    if spec.seed_checkpoint and seed_path is None:
        seed_checkpoint(spec, model)  # the folder seed_checkpoint_dir already names
    run_dir = new_run_dir(spec, model)
    write_run_files(run_dir, resolved)
    write_manifest(run_dir, resolved, data.record(spec, resolved.data))
    return spec, run_dir


def execute(run_dir: Path, spec: JobSpec, extra: list[str] = (), progress: bool = False) -> RunDir:
    """torchrun on this machine for a prepared run directory; returns its RunDir or raises."""
    run = RunDir(run_dir)
    cmd = torchrun.command(run_dir, spec, extra=list(extra))
    proc = torchrun.start(cmd, torchrun.environment(spec), run_dir / names.TORCHRUN_LOG, warm=True)
    torchrun.watch([proc], run, spec.timeout_s, "job", progress=progress, stall_timeout_s=spec.stall_timeout_s)
    return run


def run(spec: JobSpec | None = None, progress: bool = True, megatron_args: str | None = None,
        bridge_recipe: str | None = None, shrink: bool = False, **kwargs) -> RunDir:
    """Run a job and return its RunDir. `run(tp=2)` is short for `run(JobSpec(tp=2))`. The job can
    also be a Megatron-LM command line (`megatron_args`) or a Megatron-Bridge recipe
    (`bridge_recipe="MODULE:FUNCTION"`), and `shrink` runs it narrow and shallow on CPU in the same
    layout (helpers/launch/from_megatron.py); a warning names what of it the kit left out."""
    if megatron_args or bridge_recipe or shrink:
        from helpers.launch import from_megatron

        _, spec, lines = from_megatron.job(megatron_args, bridge_recipe, shrink, spec, **kwargs)
        if lines:
            warnings.warn("\n".join(lines), stacklevel=2)
        kwargs = {}
    spec = dataclasses.replace(spec or JobSpec(), **kwargs)
    spec, run_dir = prepare(spec)
    return execute(run_dir, spec, progress=progress)
