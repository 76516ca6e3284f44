"""The job runner: JobSpec -> validated layout -> seed checkpoint (cached) -> torchrun subprocess
-> progress bar -> RunDir. Also a command line: `python -m helpers.launch --tp 2 ...`; its last
printed line is the run directory.

Failures end in one exception: `InvalidJob` before anything starts, `JobFailed` (naming the
failing ranks with their last log lines) or `JobTimeout` after; the whole process group of the
job is killed either way, so no worker outlives a failed job."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from helpers import models, paths
from helpers.layout import InvalidLayout, Layout
from helpers.results import RunDir
from helpers.spec import JobSpec


class InvalidJob(ValueError):
    """The request cannot run; nothing was started."""


class JobFailed(RuntimeError):
    def __init__(self, message: str, run: RunDir, ranks: list[int]):
        super().__init__(message)
        self.run, self.ranks = run, ranks


class JobTimeout(JobFailed):
    pass


# ---- preparing a job -------------------------------------------------------------------
def cuda_device_count() -> int:
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # a CUDA build of torch on a host without a driver
        return 0


def resolve(spec: JobSpec) -> JobSpec:
    """A copy with device and precision decided (auto -> cuda if available else cpu)."""
    device = spec.device
    if device == "auto":
        device = "cuda" if cuda_device_count() > 0 else "cpu"
    if device not in ("cpu", "cuda"):
        raise InvalidJob(f"device must be cpu, cuda or auto, not {spec.device!r}")
    precision = spec.precision
    if precision == "auto":
        precision = "bf16" if device == "cuda" else "fp32"
    if precision not in ("fp32", "bf16"):
        raise InvalidJob(f"precision must be fp32, bf16 or auto, not {spec.precision!r}")
    return dataclasses.replace(spec, device=device, precision=precision)


def layout_of(spec: JobSpec) -> Layout:
    return Layout(tp=spec.tp, pp=spec.pp, vpp=spec.vpp, cp=spec.cp, ep=spec.ep, etp=spec.etp,
                  sp=spec.sp, world_size=spec.world_size, micro_batch=spec.micro_batch,
                  global_batch=spec.global_batch, seq_len=spec.seq_len,
                  first_stage_layers=spec.first_stage_layers, last_stage_layers=spec.last_stage_layers)


def model_of(spec: JobSpec) -> models.ModelPreset:
    try:
        return models.preset(spec.model).with_(**spec.model_overrides)
    except (KeyError, TypeError) as e:
        raise InvalidJob(str(e.args[0] if e.args else e)) from None


def validate(spec: JobSpec) -> None:
    """Raise InvalidJob (listing every problem) unless the job can run."""
    if spec.nproc is not None and spec.nproc < 1:
        raise InvalidJob(f"nproc must be >= 1, not {spec.nproc}")
    if spec.iters < 0:
        raise InvalidJob(f"iters must be >= 0, not {spec.iters}")
    devices = cuda_device_count() if spec.device == "cuda" else None
    if spec.device == "cuda" and devices == 0:
        raise InvalidJob("device=cuda but no CUDA device is visible; use device='cpu' or 'auto'")
    try:
        layout_of(spec).check(model_of(spec), devices=devices)
    except InvalidLayout as e:
        raise InvalidJob(str(e)) from None
    if spec.device == "cuda":  # the memory plan (helpers/memory.py): warn, do not refuse
        from helpers.memory_check import warn_if_over_device
        warn_if_over_device(spec)
    check_checkpoint_request(spec)


def check_data_request(spec: JobSpec) -> dict | None:
    """Real data: the source resolves, its files are readable, the tokenizer fits the model.
    Returns the manifest's `data` record (None for synthetic data)."""
    from helpers import datasource
    try:
        return datasource.check(spec, model_of(spec).vocab_size)
    except (FileNotFoundError, ValueError) as e:
        raise InvalidJob(str(e)) from None


def check_checkpoint_request(spec: JobSpec) -> None:
    """save/load/eval fields make sense, and every checkpoint to load is complete and holds this
    model (checked here, before any process starts; workers check again on their own node)."""
    from helpers import checkpoints

    if spec.save_interval is not None and spec.save_interval < 1:
        raise InvalidJob(f"save_interval must be >= 1 or None, not {spec.save_interval}")
    if spec.eval_only and not spec.load_dir:
        raise InvalidJob("eval_only needs load_dir (the checkpoint(s) to evaluate)")
    dirs = spec.load_dir if isinstance(spec.load_dir, list) else [spec.load_dir] if spec.load_dir else []
    if len(dirs) > 1 and not spec.eval_only:
        raise InvalidJob("load_dir may list several checkpoints only with eval_only=True")
    for d in dirs:
        path = os.path.expandvars(str(d))
        if "$" in path:
            continue  # names a node-local variable: the workers check it on their node
        try:
            info = checkpoints.verify(path, model_of(spec).to_dict())
            checkpoints.check_optimizer(info, spec.dist_opt, spec.load_optimizer and not spec.eval_only)
        except checkpoints.CheckpointError as e:
            raise InvalidJob(str(e)) from None


# ---- running ---------------------------------------------------------------------------
def _env(spec: JobSpec) -> dict:
    env = dict(os.environ)
    env.update({
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),  # many ranks share few cores
        "NCCL_NVLS_ENABLE": "0",  # NVLink multicast stays off on shared machines
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",  # Megatron's TP/SP comm-compute ordering expects it
        "PYTHONPATH": os.pathsep.join([str(paths.REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "PYTHONWARNINGS": "ignore",
    })
    if spec.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # CPU jobs never touch a GPU, even where one exists
    env.update({k: str(v) for k, v in spec.env.items()})
    return env


def _git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(paths.REPO_ROOT), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except Exception:
        return None


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {"python": sys.version.split()[0]}
    for pkg in ["torch", "megatron-core", "megatron-bridge", "transformer-engine"]:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def _new_run_dir(spec: JobSpec) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    name = spec.name or f"{spec.model}-{spec.layout_name()}"
    path = Path(spec.out) / f"{name}-{stamp}"
    (path / "logs").mkdir(parents=True)
    return path


def _torchrun(run_dir: Path, spec: JobSpec, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", str(spec.world_size), "-m", "helpers.runtime.train", str(run_dir), *extra]


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _crashed_ranks(run: RunDir) -> dict[int, int]:
    """{rank: exit code} from torchrun's failure summary (ranks that died without a Python error)."""
    log = run.path / "logs" / "torchrun.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    found = re.findall(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", text)
    return {int(r): int(code) for r, code in found}


# A rank whose peer died fails too, with one of these; it is a consequence, not the cause.
_PEER_LOST = re.compile(r"Connection closed by peer|Connection reset|Broken pipe|communicator was aborted"
                        r"|NCCL error|Timed out|timed out|Socket Timeout", re.I)


def _failure_message(run: RunDir, what: str) -> tuple[str, list[int]]:
    errors = run.errors
    primary = {r: e for r, e in errors.items() if not _PEER_LOST.search(e["message"])}
    for r, code in _crashed_ranks(run).items():
        if r not in errors and code != -signal.SIGTERM:  # SIGTERM: torchrun's own teardown
            primary[r] = {"type": "ProcessDied", "message": f"exit code {code} without a Python error "
                          f"(killed, out of memory, or a crash in native code); last log lines:\n"
                          f"{run.log_tail(r, 6)}"}
    ranks = sorted(primary) or sorted(errors) or run.stalled_ranks()
    beats = run.heartbeats
    lines = [f"{what} (run directory: {run.path})"]
    if not errors and not primary:
        lines.append(f"stalled rank(s): {ranks} (furthest behind; the others wait for them)")
    for r in ranks[:4]:
        if r in primary or r in errors:
            e = primary.get(r) or errors[r]
            lines.append(f"rank {r}: {e['type']}: {e['message']}")
        else:
            where = beats.get(r, {})
            lines.append(f"rank {r}: last reached '{where.get('phase', 'process start')}'"
                         f" (iteration {where.get('iteration', 0)}); last log lines:\n{run.log_tail(r, 6)}")
    lost = sorted(set(errors) - set(ranks))
    if lost:
        lines.append(f"ranks {lost} stopped because a peer failed")
    if not errors and not primary:
        launcher = run.path / "logs" / "torchrun.log"
        if launcher.exists():
            lines.append("torchrun: " + "\n".join(launcher.read_text(errors="replace").splitlines()[-6:]))
    return "\n".join(lines), ranks


def _progress_bar(total: int, desc: str, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc, unit="it", leave=True)


def _execute(run_dir: Path, spec: JobSpec, extra: list[str], progress: bool) -> RunDir:
    run = RunDir(run_dir)
    log = open(run_dir / "logs" / "torchrun.log", "w")
    proc = subprocess.Popen(_torchrun(run_dir, spec, extra), stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=_env(spec), cwd=paths.REPO_ROOT,
                            start_new_session=True)  # own process group: one kill stops every rank
    bar = _progress_bar(spec.iters, run_dir.name, progress and spec.iters > 0)
    deadline = time.monotonic() + spec.timeout_s
    seen = 0
    try:
        while proc.poll() is None:
            if time.monotonic() > deadline:
                _kill_group(proc)
                msg, ranks = _failure_message(run, f"job timed out after {spec.timeout_s:.0f} s")
                raise JobTimeout(msg, run, ranks)
            time.sleep(0.2)
            if bar is not None:
                done = len(run.metrics)
                if done > seen:
                    last = run.metrics[-1]
                    bar.update(done - seen)
                    bar.set_postfix(loss=f"{last['loss']:.4f}")
                    seen = done
    except BaseException:
        _kill_group(proc)  # KeyboardInterrupt in a notebook also ends the job
        raise
    finally:
        if bar is not None:
            bar.close()
        log.close()
    if proc.returncode != 0:
        msg, ranks = _failure_message(run, f"job failed (torchrun exit code {proc.returncode})")
        raise JobFailed(msg, run, ranks)
    return run


def seed_checkpoint(spec: JobSpec) -> Path:
    """The cached world-size-1 checkpoint for this model, seed and precision; built on first use."""
    model = model_of(spec)
    key = json.dumps([model.to_dict(), spec.seed, spec.precision, _versions()["megatron-core"]], sort_keys=True)
    path = paths.cache_dir() / "seed-checkpoints" / f"{model.name}-seed{spec.seed}-{spec.precision}-" \
        f"{hashlib.sha256(key.encode()).hexdigest()[:10]}"
    if (path / "kit_complete").exists():
        return path
    seed_spec = dataclasses.replace(spec, tp=1, pp=1, vpp=None, cp=1, ep=1, etp=None, sp=False,
                                    dist_opt=False, nproc=1, iters=0, seed_checkpoint=False,
                                    first_stage_layers=None, last_stage_layers=None, global_batch=None,
                                    name=f"seed-{model.name}", out=str(paths.cache_dir() / "seed-runs"))
    run_dir = _new_run_dir(seed_spec)
    seed_spec.write(run_dir / "spec.json")
    _execute(run_dir, seed_spec, ["--seed-checkpoint-out", str(path)], progress=False)
    return path


def run(spec: JobSpec | None = None, progress: bool = True, **kwargs) -> RunDir:
    """Run a job and return its RunDir. `run(tp=2)` is short for `run(JobSpec(tp=2))`."""
    spec = dataclasses.replace(spec or JobSpec(), **kwargs)
    if spec.out == "runs":
        spec = dataclasses.replace(spec, out=str(paths.runs_dir()))
    spec = resolve(spec)
    validate(spec)
    data = check_data_request(spec)
    if data:  # pin the resolved source: a rerun from the manifest reads the same text
        spec = dataclasses.replace(spec, data_dir=data["pinned_data_dir"])
    env = dict(spec.env)
    if spec.seed_checkpoint:
        env["KIT_SEED_CHECKPOINT"] = str(seed_checkpoint(spec))
    spec = dataclasses.replace(spec, env=env)
    run_dir = _new_run_dir(spec)
    spec.write(run_dir / "spec.json")
    (run_dir / "manifest.json").write_text(json.dumps({
        "spec": spec.to_dict(),
        "layout": {"world_size": spec.world_size, "tp": spec.tp, "pp": spec.pp, "vpp": spec.vpp,
                   "cp": spec.cp, "dp": spec.dp, "ep": spec.ep, "etp": spec.expert_tp,
                   "edp": spec.edp, "sp": spec.sp, "dist_opt": spec.dist_opt},
        "model": model_of(spec).to_dict(),
        "data": data or {"kind": "synthetic", "source": "helpers/runtime/synthetic.py"},
        "versions": _versions(),
        "git_revision": _git_revision(),
        "command": _torchrun(run_dir, spec, []),
        "repeat": f"python -m helpers.launch --from-manifest {run_dir / 'manifest.json'}",
        "created": datetime.now().isoformat(timespec="seconds"),
    }, indent=2))
    return _execute(run_dir, spec, [], progress)


if __name__ == "__main__":
    from helpers.cli import main
    main()
