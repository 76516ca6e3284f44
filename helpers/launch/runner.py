"""The job runner: JobSpec -> every auto decided and every rule checked (helpers/job/rules/) ->
seed checkpoint (cached) -> run directory (spec.json + manifest.json) -> torchrun -> RunDir.

`prepare` is everything before the processes start; `run` (one node), the multi-node simulation
and `python -m helpers.launch.multinode prepare` (real nodes) all go through it, so they check and
record the same things. Failures end in one exception (helpers/errors.py): `InvalidJob` before
anything starts (listing every problem), `JobFailed` (naming the failing ranks with their last log
lines) or `JobTimeout` after; the whole process group of the job is killed either way, so no worker
outlives a failed job."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
from datetime import datetime
from pathlib import Path

from helpers.job import checkpoint_dir, data, hf_model, paths, rules
from helpers.job.models import ModelPreset
from helpers.job.spec import JobSpec
from helpers.launch import environment, torchrun
from helpers.rundir import names
from helpers.rundir.reader import RunDir


# ---- deciding and checking ---------------------------------------------------------------------
def check(spec: JobSpec, env: rules.Environment | None = None) -> tuple[JobSpec, rules.Checked]:
    """The spec with every auto decided for this machine, and what the rules found. Starts nothing."""
    env = env or environment.probe(spec.device)
    spec = rules.resolve(spec, env)
    return spec, rules.check(spec, env)


def validate(spec: JobSpec, env: rules.Environment | None = None) -> JobSpec:
    """The resolved spec, or InvalidJob listing every problem (`.violations`, `.names`)."""
    spec, checked = check(spec, env)
    checked.refuse()
    return spec


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


def hf_record(spec: JobSpec, model: ModelPreset) -> dict | None:
    """The imported folder as a run records it: path, name, config.json's SHA-256, architectures."""
    if not spec.hf_model:
        return None
    return {"path": spec.hf_model, "name": model.name, "config_sha256": hf_model.config_hash(spec.hf_model),
            "architectures": hf_model.read_config(spec.hf_model)["architectures"]}


def write_manifest(run_dir: Path, spec: JobSpec, model: ModelPreset, data_record: dict | None) -> None:
    (run_dir / names.MANIFEST).write_text(json.dumps({
        "spec": spec.to_dict(),
        "layout": spec.layout_record(),
        "model": model.to_dict(),
        "data": data_record or {"kind": "synthetic", "source": "helpers/runtime/data/synthetic.py"},
        "hf_model": hf_record(spec, model),  # the imported folder: name, config hash (Bridge version: versions)
        "versions": environment.versions(),
        "git_revision": git_revision(),
        "command": torchrun.command(run_dir, spec.world_size),
        "repeat": f"python -m helpers --from-manifest {run_dir / names.MANIFEST}",
        "created": datetime.now().isoformat(timespec="seconds"),
    }, indent=2))


# ---- the seed checkpoint -------------------------------------------------------------------------
def seed_checkpoint(spec: JobSpec, model: ModelPreset) -> Path:
    """The cached world-size-1 checkpoint for this model, seed and precision; built on first use.
    `spec` is resolved (precision decided)."""
    weights = "bf16" if spec.bf16 else spec.precision  # fp8 jobs keep bf16 weights: bf16's seed, the same start
    key = json.dumps([model.to_dict(), spec.seed, weights, environment.versions()["megatron-core"]], sort_keys=True)
    path = paths.cache_dir() / "seed-checkpoints" / f"{model.name}-seed{spec.seed}-{weights}-" \
        f"{hashlib.sha256(key.encode()).hexdigest()[:10]}"
    if (path / checkpoint_dir.SEED_MARKER).exists():
        return path
    seed_spec = dataclasses.replace(spec, precision=weights, tp=1, pp=1, vpp=None, cp=1, ep=1, etp=None, sp=False,
                                    dist_opt=False, nproc=1, iters=0, seed_checkpoint=False,
                                    first_stage_layers=None, last_stage_layers=None, global_batch=None,
                                    data="synthetic", save_interval=None, load_dir=None, eval_only=False,
                                    name=f"seed-{model.name}", out=str(paths.cache_dir() / "seed-runs"))
    run_dir = new_run_dir(seed_spec, model)
    seed_spec.write(run_dir / names.SPEC)
    execute(run_dir, seed_spec, ["--seed-checkpoint-out", str(path)], progress=False)
    return path


# ---- running ---------------------------------------------------------------------------------
def prepare(spec: JobSpec, seed_path: str | None = None) -> tuple[JobSpec, Path]:
    """Check the job, build (or find) the seed checkpoint, write the run directory's spec.json
    and manifest.json. Nothing runs yet. `seed_path` overrides where workers find the seed
    checkpoint (e.g. "$KIT_NODE_DIR/seed-checkpoint" for node-local copies)."""
    env = environment.probe(spec.device)
    spec, checked = check(spec, env)
    checked.refuse()
    model = checked.model
    if spec.device == "cuda":  # the memory plan: warn, do not refuse (a plan can be wrong)
        from helpers.memory.fit import warn_if_over_device
        warn_if_over_device(spec, model, env.device_memory_bytes)
    source = data.resolve(spec)
    record = data.record(spec, source)
    if source:  # pin the resolved source: a rerun from the manifest reads the same text
        spec = dataclasses.replace(spec, **data.pinned(spec, source))
    variables = dict(spec.env)
    if spec.seed_checkpoint:
        variables["KIT_SEED_CHECKPOINT"] = seed_path or str(seed_checkpoint(spec, model))
    spec = dataclasses.replace(spec, env=variables)
    run_dir = new_run_dir(spec, model)
    spec.write(run_dir / names.SPEC)
    write_manifest(run_dir, spec, model, record)
    return spec, run_dir


def execute(run_dir: Path, spec: JobSpec, extra: list[str] = (), progress: bool = False) -> RunDir:
    """torchrun on this machine for a prepared run directory; returns its RunDir or raises."""
    run = RunDir(run_dir)
    proc = torchrun.start(torchrun.command(run_dir, spec.world_size, extra=list(extra)),
                          torchrun.environment(spec), run_dir / names.TORCHRUN_LOG)
    torchrun.watch([proc], run, spec.timeout_s, "job", progress=progress, stall_timeout_s=spec.stall_timeout_s)
    return run


def run(spec: JobSpec | None = None, progress: bool = True, **kwargs) -> RunDir:
    """Run a job and return its RunDir. `run(tp=2)` is short for `run(JobSpec(tp=2))`."""
    spec = dataclasses.replace(spec or JobSpec(), **kwargs)
    spec, run_dir = prepare(spec)
    return execute(run_dir, spec, progress=progress)
