"""The job runner: JobSpec -> checks (layout, data, checkpoints) -> seed checkpoint (cached) ->
run directory (spec.json + manifest.json) -> torchrun -> RunDir.

`prepare` is everything before the processes start; `run` (one node), the multi-node simulation
and `python -m helpers.launch.multinode prepare` (real nodes) all go through it, so they check and
record the same things. Failures end in one exception (helpers/errors.py): `InvalidJob` before
anything starts, `JobFailed` (naming the failing ranks with their last log lines) or `JobTimeout`
after; the whole process group of the job is killed either way, so no worker outlives a failed job."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from helpers.errors import CheckpointError, DataNotFound, InvalidJob, InvalidLayout
from helpers.job import backend, data_source, hf_model, models, paths
from helpers.job.layout import Layout
from helpers.job.spec import JobSpec
from helpers.launch import precision_check, torchrun
from helpers.rundir import checkpoint_dir, names
from helpers.rundir.reader import RunDir

PRECISIONS = ("fp32", "bf16", "fp8")


# ---- deciding and checking ---------------------------------------------------------------------
def cuda_device_count() -> int:
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # a CUDA build of torch on a host without a driver
        return 0


def resolve(spec: JobSpec) -> JobSpec:
    """A copy with device, precision and backend decided (auto -> cuda if available else cpu; TE when
    installed on GPU, helpers/job/backend.py) and the
    default output folder made absolute (runs/ at the repository root)."""
    device = spec.device
    if device == "auto":
        device = "cuda" if cuda_device_count() > 0 else "cpu"
    if device not in ("cpu", "cuda"):
        raise InvalidJob(f"device must be cpu, cuda or auto, not {spec.device!r}")
    precision = spec.precision
    if precision == "auto":
        precision = "bf16" if device == "cuda" else "fp32"
    if precision not in PRECISIONS:
        raise InvalidJob(f"precision must be {', '.join(PRECISIONS)} or auto, not {spec.precision!r}")
    out = str(paths.runs_dir()) if spec.out == "runs" else spec.out
    hf = {}
    if spec.hf_model:  # workers may start elsewhere; the HF weights are the same start in every layout
        hf = dict(hf_model=str(Path(spec.hf_model).expanduser().resolve()), seed_checkpoint=False)
    try:
        chosen = backend.resolve(spec.backend, device)
    except ValueError as e:
        raise InvalidJob(str(e)) from None
    return dataclasses.replace(spec, device=device, precision=precision, out=out, backend=chosen, **hf)


def model_of(spec: JobSpec) -> models.ModelPreset:
    if spec.hf_model and spec.model_overrides:
        raise InvalidJob("model_overrides change a preset; an hf_model's architecture comes from its config.json "
                         "(edit and re-save the HF model instead)")
    try:
        return spec.model_preset()
    except (KeyError, TypeError) as e:
        raise InvalidJob(str(e.args[0] if e.args else e)) from None


def check_hf_request(spec: JobSpec) -> dict | None:
    """hf_model/export_hf make sense (the folder itself is checked by model_of). Returns the
    manifest's `hf_model` record."""
    if spec.export_hf and not spec.hf_model:
        raise InvalidJob("export_hf writes an imported model back to Hugging Face format: it needs hf_model")
    if not spec.hf_model:
        return None
    if spec.export_hf and spec.eval_only and len(spec.load_paths()) != 1:
        raise InvalidJob("export_hf with eval_only writes one checkpoint back to Hugging Face format: give "
                         f"exactly one load_dir, not {len(spec.load_paths())}")
    if spec.export_hf and not hf_model.has_tokenizer(spec.hf_model):
        raise InvalidJob(f"export_hf needs the tokenizer in the hf_model folder {spec.hf_model} (Megatron-Bridge "
                         "writes it into the export): save one there with tokenizer.save_pretrained(folder)")
    return {"path": spec.hf_model, "name": model_of(spec).name, "config_sha256": hf_model.config_hash(spec.hf_model),
            "architectures": hf_model.read_config(spec.hf_model)["architectures"]}


def check_choices(spec: JobSpec) -> None:
    """Fields with a fixed set of values (the CLI refuses others itself; the Python API comes here)."""
    for f in dataclasses.fields(spec):
        choices = f.metadata.get("choices")
        if choices and getattr(spec, f.name) not in choices:
            raise InvalidJob(f"{f.name} must be one of {', '.join(map(str, choices))}, not {getattr(spec, f.name)!r}")


def check_lr_schedule(spec: JobSpec) -> None:
    """The learning-rate fields describe a schedule Megatron's OptimizerParamScheduler accepts."""
    if spec.lr < 0 or spec.min_lr < 0 or spec.min_lr > spec.lr:
        raise InvalidJob(f"learning rates must satisfy 0 <= min_lr <= lr, not min_lr={spec.min_lr}, lr={spec.lr}")
    if spec.lr_warmup_iters < 0:
        raise InvalidJob(f"lr_warmup_iters must be >= 0, not {spec.lr_warmup_iters}")
    scheduled = spec.lr_warmup_iters > 0 or spec.lr_decay != "constant" or spec.lr_decay_iters is not None
    if scheduled and not spec.eval_only and spec.iters > 0 and spec.lr_warmup_iters >= spec.lr_decay_end:
        what = f"lr_decay_iters={spec.lr_decay_iters}" if spec.lr_decay_iters is not None else f"iters={spec.iters}"
        raise InvalidJob(f"lr_warmup_iters={spec.lr_warmup_iters} must end before {what} (where the decay ends): "
                         f"shorten the warm-up or lengthen the run")


def validate(spec: JobSpec) -> None:
    """Raise InvalidJob (listing every problem; `.violations` keeps the layout's) unless the job can run."""
    if spec.nproc is not None and spec.nproc < 1:
        raise InvalidJob(f"nproc must be >= 1, not {spec.nproc}")
    if spec.iters < 0:
        raise InvalidJob(f"iters must be >= 0, not {spec.iters}")
    check_choices(spec)
    check_lr_schedule(spec)
    check_hf_request(spec)
    devices = cuda_device_count() if spec.device == "cuda" else None
    if spec.device == "cuda" and devices == 0:
        raise InvalidJob("device=cuda but no CUDA device is visible; use device='cpu' or 'auto'")
    try:
        Layout.of(spec, backend=spec.backend if spec.backend in ("local", "te") else "local").check(
            model_of(spec), devices=devices)
    except InvalidLayout as e:
        raise InvalidJob.from_layout(e) from None
    if spec.device == "cuda":  # the memory plan: warn, do not refuse
        from helpers.memory.fit import warn_if_over_device
        warn_if_over_device(spec)
    precision_check.check(spec, model_of(spec))
    check_checkpoint_request(spec)


def check_data_request(spec: JobSpec) -> dict | None:
    """Real data: the source resolves, its files are readable, the tokenizer fits the model.
    Returns the manifest's `data` record (None for synthetic data)."""
    try:
        return data_source.check(spec, model_of(spec).vocab_size)
    except (DataNotFound, ValueError) as e:
        raise InvalidJob(str(e)) from None


def check_checkpoint_request(spec: JobSpec) -> None:
    """save/load/eval fields make sense, and every checkpoint to load is complete and holds this
    model (checked here, before any process starts; workers check again on their own node)."""
    if spec.save_interval is not None and spec.save_interval < 1:
        raise InvalidJob(f"save_interval must be >= 1 or None, not {spec.save_interval}")
    if spec.eval_only and not spec.load_dir:
        raise InvalidJob("eval_only needs load_dir (the checkpoint(s) to evaluate)")
    if len(spec.load_paths()) > 1 and not spec.eval_only:
        raise InvalidJob("load_dir may list several checkpoints only with eval_only=True")
    for path in spec.load_paths():
        if "$" in str(path):
            continue  # names a node-local variable: the workers check it on their node
        try:
            info = checkpoint_dir.verify(path, model_of(spec).to_dict())
            checkpoint_dir.check_optimizer(info, spec.dist_opt, spec.load_optimizer and not spec.eval_only)
        except CheckpointError as e:
            raise InvalidJob(str(e)) from None


# ---- what a run directory records ---------------------------------------------------------------
def git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(paths.REPO_ROOT), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except Exception:
        return None


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {"python": sys.version.split()[0]}
    for pkg in ["torch", "megatron-core", "megatron-bridge", "transformer-engine"]:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def new_run_dir(spec: JobSpec) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    name = spec.name or f"{model_of(spec).name}-{spec.layout_name()}"
    path = Path(spec.out) / f"{name}-{stamp}"
    (path / names.LOGS).mkdir(parents=True)
    return path


def write_manifest(run_dir: Path, spec: JobSpec, data: dict | None) -> None:
    (run_dir / names.MANIFEST).write_text(json.dumps({
        "spec": spec.to_dict(),
        "layout": spec.layout_record(),
        "model": model_of(spec).to_dict(),
        "data": data or {"kind": "synthetic", "source": "helpers/runtime/synthetic.py"},
        "hf_model": check_hf_request(spec),  # the imported folder: name, config hash (Bridge version: versions)
        "versions": versions(),
        "git_revision": git_revision(),
        "command": torchrun.command(run_dir, spec.world_size),
        "repeat": f"python -m helpers --from-manifest {run_dir / names.MANIFEST}",
        "created": datetime.now().isoformat(timespec="seconds"),
    }, indent=2))


# ---- the seed checkpoint -------------------------------------------------------------------------
def seed_checkpoint(spec: JobSpec) -> Path:
    """The cached world-size-1 checkpoint for this model, seed and precision; built on first use."""
    model = model_of(spec)
    weights = "bf16" if spec.bf16 else spec.precision  # fp8 jobs keep bf16 weights: bf16's seed, the same start
    key = json.dumps([model.to_dict(), spec.seed, weights, versions()["megatron-core"]], sort_keys=True)
    path = paths.cache_dir() / "seed-checkpoints" / f"{model.name}-seed{spec.seed}-{weights}-" \
        f"{hashlib.sha256(key.encode()).hexdigest()[:10]}"
    if (path / checkpoint_dir.SEED_MARKER).exists():
        return path
    seed_spec = dataclasses.replace(spec, precision=weights, tp=1, pp=1, vpp=None, cp=1, ep=1, etp=None, sp=False,
                                    dist_opt=False, nproc=1, iters=0, seed_checkpoint=False,
                                    first_stage_layers=None, last_stage_layers=None, global_batch=None,
                                    data="synthetic", save_interval=None, load_dir=None, eval_only=False,
                                    name=f"seed-{model.name}", out=str(paths.cache_dir() / "seed-runs"))
    run_dir = new_run_dir(seed_spec)
    seed_spec.write(run_dir / names.SPEC)
    execute(run_dir, seed_spec, ["--seed-checkpoint-out", str(path)], progress=False)
    return path


# ---- running ---------------------------------------------------------------------------------
def prepare(spec: JobSpec, seed_path: str | None = None) -> tuple[JobSpec, Path]:
    """Check the job, build (or find) the seed checkpoint, write the run directory's spec.json
    and manifest.json. Nothing runs yet. `seed_path` overrides where workers find the seed
    checkpoint (e.g. "$KIT_NODE_DIR/seed-checkpoint" for node-local copies)."""
    spec = resolve(spec)
    validate(spec)
    data = check_data_request(spec)
    if data:  # pin the resolved source: a rerun from the manifest reads the same text
        spec = dataclasses.replace(spec, data_dir=data["pinned_data_dir"])
    env = dict(spec.env)
    if spec.seed_checkpoint:
        env["KIT_SEED_CHECKPOINT"] = seed_path or str(seed_checkpoint(spec))
    spec = dataclasses.replace(spec, env=env)
    run_dir = new_run_dir(spec)
    spec.write(run_dir / names.SPEC)
    write_manifest(run_dir, spec, data)
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
