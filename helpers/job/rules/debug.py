"""What the job records around the loop and the failures it injects on purpose: the log interval,
the captured GEMM operands, the profiler window and every fault (helpers/job/faults.py), each one
able to happen in this run. A fault or a capture that could never fire would pass silently, so it
is refused here. Category "debug"."""
from __future__ import annotations

from pathlib import Path

from helpers.errors import CheckpointError
from helpers.job import checkpoint_dir, faults
from helpers.job.violation import Found, Violation


def check(spec) -> list[Violation]:
    v = Found("debug")
    if spec.log_interval < 1:
        v.add("log_interval_positive", f"log_interval must be >= 1, not {spec.log_interval}",
              "use 1 (every iteration) or a larger interval")
    if spec.capture_tensors_at is not None and not _first(spec) <= spec.capture_tensors_at <= _trained(spec):
        v.add("capture_tensors_at_outside_run", f"capture_tensors_at={spec.capture_tensors_at} is not an iteration "
              f"this job trains ({_run_words(spec)})", f"pick an iteration from {_first(spec)} to {max(spec.iters, 1)}")
    if spec.torch_profile:
        _profile(spec, v)
    _faults(spec, v)
    return v


def _trained(spec) -> int:
    """The last iteration this job trains (0: none)."""
    return 0 if spec.eval_only else spec.iters


def _first(spec) -> int:
    """The first iteration this job trains: 1, or the one after the checkpoint it resumes from."""
    loaded = _loaded_iterations(spec) if spec.load_dir and not spec.eval_only else None
    return 1 + (max(loaded) if loaded else 0)


def _run_words(spec) -> str:
    if spec.eval_only:
        return "eval_only trains none"
    first = _first(spec)
    return f"iterations {first}..{spec.iters}" + (f", resuming from iteration {first - 1}" if first > 1 else "")


def _loaded_iterations(spec) -> set[int] | None:
    """The iterations of the checkpoints load_dir names; None when they are only known on the nodes
    ($VARS) or do not resolve (rules/checkpoint.py names that problem)."""
    loaded = set()
    for path in spec.load_paths():
        if "$" in str(path):
            return None
        try:
            name = checkpoint_dir.resolve(path).name
        except CheckpointError:
            return None
        if not name.removeprefix("iter_").isdigit():
            return None
        loaded.add(int(name.removeprefix("iter_")))
    return loaded


def _profile(spec, v: Found) -> None:
    if spec.device != "cuda":
        v.add("torch_profile_needs_cuda", f"torch_profile records GPU kernels, but the job runs on {spec.device}",
              "run on device='cuda', or leave torch_profile unset")
    if _trained(spec) < 3:
        v.add("torch_profile_needs_iters", f"torch_profile profiles the last two of at least 3 iterations (the first "
              f"warms up), but the job trains {_trained(spec)}", "train 3 or more iterations")
    folder = Path(spec.torch_profile).expanduser().parent
    if not folder.is_dir():
        v.add("torch_profile_folder_missing", f"torch_profile={spec.torch_profile!r}: folder {folder} does not exist",
              f"create {folder} first, or write the profile into an existing folder")


def _faults(spec, v: Found) -> None:
    if not isinstance(spec.faults, (list, tuple)):
        v.add("faults_not_a_list", f"faults must be a list of {faults.FORMAT}, not {spec.faults!r}",
              f"wrap it in a list, e.g. faults=[{spec.faults!r}]")
        return
    for text in spec.faults:
        try:
            fault = faults.parse(text)
        except ValueError as e:
            v.add("fault_format", str(e), f"write each fault as {faults.FORMAT}, e.g. 'raise@2:rank1'")
            continue
        if fault.kind not in faults.KINDS:
            v.add("fault_unknown_kind", f"fault {text!r}: unknown kind {fault.kind!r}",
                  f"use one of {', '.join(faults.KINDS)}")
            continue
        if fault.rank is not None and not 0 <= fault.rank < spec.world_size:
            v.add("fault_rank_outside_world", f"fault {text!r}: rank {fault.rank} is not in this job's "
                  f"{spec.world_size} rank(s)", f"pick a rank from 0 to {spec.world_size - 1}, or leave out "
                  f":rank for every rank")
        if fault.event == "load":
            _load_fault(spec, text, fault, v)
        elif not _first(spec) <= fault.iteration <= _trained(spec):
            v.add("fault_iteration_outside_run", f"fault {text!r}: iteration {fault.iteration} is not one this job "
                  f"trains ({_run_words(spec)})", f"pick an iteration from {_first(spec)} to {max(spec.iters, 1)}")
        elif fault.event == "save" and not _saves_at(spec, fault.iteration):
            v.add("fault_not_at_a_save", f"fault {text!r}: no checkpoint is saved at iteration {fault.iteration} "
                  f"(save_interval={spec.save_interval}, iters={spec.iters})",
                  "pick a saving iteration (a multiple of save_interval, or the last), or set save_interval")


def _saves_at(spec, iteration: int) -> bool:
    return bool(spec.save_interval) and (iteration % spec.save_interval == 0 or iteration == spec.iters)


def _load_fault(spec, text: str, fault: faults.Fault, v: Found) -> None:
    if not spec.load_paths():
        v.add("fault_load_without_load_dir", f"fault {text!r} fires while a checkpoint loads, but load_dir is "
              "not set", "set load_dir, or use an iteration fault (e.g. hang@N)")
        return
    loaded = _loaded_iterations(spec)
    if loaded is not None and fault.iteration not in loaded:
        v.add("fault_load_iteration_not_loaded", f"fault {text!r}: the checkpoint(s) to load are of iteration(s) "
              f"{sorted(loaded)}, not {fault.iteration}", "use the iteration of the checkpoint load_dir names")
