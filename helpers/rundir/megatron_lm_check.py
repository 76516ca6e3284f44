"""Megatron-LM's own argument checks on a command the kit wrote (megatron-lm.sh): `parse_args` and
`validate_args` from the megatron-core wheel's megatron/training/arguments.py, on CPU as on the GPU
the command is for: WORLD_SIZE = the job's world size, CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-LM
asserts it with TP or CP below Blackwell), the GPU's architecture answered as a Hopper's (9.0).

`validate_args` changes module-level state (global flags, environment, warnings already given), so
every command is checked in a fresh process: one Python process imports Megatron-LM once and forks
a child per command, which parses, validates and reports the parsed arguments as JSON.

    args = check_megatron_lm_command(run.path / names.MEGATRON_LM_SCRIPT, run.spec.world_size)
    args.tensor_model_parallel_size, args.data_parallel_size, ...
    check_many([(path_or_argv, world_size), ...])  # one process for all: a Namespace or MegatronRefused each

    parsed_here(argv, world_size)  # the same, forked from this process (which imports Megatron-LM's
                                   # arguments module once): a training rank's checkpoint `args`

A refusal raises MegatronRefused with Megatron-LM's own message."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.errors import MegatronRefused

HOPPER = (9, 0)  # compute capability the checks answer for (H100/H200)
TIMEOUT_S = 300.0


def _argv(path_or_args) -> list[str]:
    from helpers.rundir import megatron_lm
    if isinstance(path_or_args, (list, tuple)):
        return [str(a) for a in path_or_args]
    return megatron_lm.arguments(path_or_args)


def check_many(commands) -> list:
    """Each (path or argv, world size) checked in its own forked process: the parsed arguments as
    an argparse.Namespace, or a MegatronRefused carrying Megatron-LM's message."""
    todo = [{"argv": _argv(c), "world_size": int(w)} for c, w in commands]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    out = subprocess.run([sys.executable, "-m", "helpers.rundir.megatron_lm_check"], input=json.dumps(todo),
                         capture_output=True, text=True, timeout=TIMEOUT_S, env=env,
                         cwd=Path(__file__).resolve().parents[2])
    if out.returncode != 0:
        raise RuntimeError(f"the Megatron-LM check process failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    results = []
    for item, command in zip(json.loads(out.stdout.splitlines()[-1]), todo):
        if "error" in item:
            results.append(MegatronRefused(f"Megatron-LM refuses the command at world size {command['world_size']}: "
                                           f"{item['error']}\n  arguments: {' '.join(command['argv'])}"))
        else:
            results.append(argparse.Namespace(**item["args"]))
    return results


def check_megatron_lm_command(path_or_args, world_size: int) -> argparse.Namespace:
    """Megatron-LM's parsed and validated arguments for a megatron-lm.sh (path or text) or an argv
    list; MegatronRefused with Megatron-LM's message when parse_args or validate_args refuses it."""
    result = check_many([(path_or_args, world_size)])[0]
    if isinstance(result, MegatronRefused):
        raise result
    return result


# ---- the checking process ------------------------------------------------------------------------
def _as_hopper() -> None:
    """In a forked child only: answer Megatron-LM's GPU-architecture questions as a Hopper GPU
    (validate_args asks, and the CPU or the GPU this runs on may be another)."""
    import torch
    from megatron.training import arguments

    arguments.get_device_arch_version = lambda: HOPPER[0]
    torch.cuda.get_device_capability = lambda *_, **__: HOPPER


def _parse_in_child(argv: list[str], world_size: int) -> argparse.Namespace | dict:
    """Runs in a forked child: Megatron-LM's parse_args + validate_args as on a Hopper GPU. The
    parsed Namespace, or {"error": message}."""
    import contextlib
    import io

    from megatron.training import arguments

    _as_hopper()
    os.environ.update(WORLD_SIZE=str(world_size), RANK="0", LOCAL_RANK="0", CUDA_DEVICE_MAX_CONNECTIONS="1")
    sys.argv = ["pretrain_gpt.py", *argv]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        try:
            args = arguments.parse_args()
        except SystemExit:  # argparse: an unknown flag or a bad value, its message printed
            return {"error": printed.getvalue().strip().splitlines()[-1]}
        arguments.validate_args(args)
    return args


def _in_fork(argv: list[str], world_size: int) -> argparse.Namespace | dict:
    """parse_args + validate_args in a forked child (they change module-level state: global flags,
    the environment, warnings already given)."""
    from helpers.job import forked

    return forked.call(_parse_in_child, argv, world_size)


def parsed_here(argv: list[str], world_size: int) -> argparse.Namespace:
    """Megatron-LM's parsed and validated arguments for `argv` at `world_size`, from a child forked
    off this process (a training rank: Megatron-Core is imported already, so the fork costs well
    under a second). MegatronRefused with Megatron-LM's message when it refuses them."""
    import warnings

    from helpers.job.import_phase import without_modelopt

    with warnings.catch_warnings(), without_modelopt():
        warnings.simplefilter("ignore")
        import megatron.training.arguments  # noqa: F401  (the child inherits it)
    result = _in_fork([str(a) for a in argv], int(world_size))
    if isinstance(result, dict):
        raise MegatronRefused(f"Megatron-LM refuses the command at world size {world_size}: {result['error']}")
    return result


def _main() -> None:
    import warnings

    warnings.simplefilter("ignore")
    from helpers.job.import_phase import without_modelopt

    with without_modelopt():
        import megatron.training.arguments  # noqa: F401  (imported once; every child inherits it)

    results = []
    for command in json.loads(sys.stdin.read()):
        result = _in_fork(command["argv"], command["world_size"])
        results.append(result if isinstance(result, dict) else
                       {"args": json.loads(json.dumps(vars(result), default=str))})
    print(json.dumps(results))


if __name__ == "__main__":
    _main()
