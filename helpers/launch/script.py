"""Run your own torchrun script through the kit: the same torchrun, on CPU with the kit's
compatibility layer applied to Megatron-Core first (a script written for GPUs runs with gloo),
its output kept, a failure reported with its last lines.

    from helpers import launch
    result = launch.run_script("my_train.py", nproc=2, args=["--tp", "2"])
    result.output        # every rank's printed lines (torchrun prefixes them with the rank)

    python -m helpers.launch.script my_train.py --nproc 2 -- --tp 2"""
from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from helpers.errors import ScriptFailed
from helpers.job import paths
from helpers.launch.torchrun import TORCHRUN

ENTRY = "helpers.runtime.compat.user_script"


@dataclasses.dataclass
class ScriptRun:
    script: Path
    nproc: int
    args: list[str]
    output: str
    seconds: float


def command(script: Path, nproc: int, args: list[str], log_dir) -> list[str]:
    """torchrun's agent keeps a folder per attempt and a failed rank's error file under --log-dir;
    without one it leaves them in the system's temp folder (helpers/rundir/names.TORCHELASTIC_LOGS)."""
    return [sys.executable, "-m", TORCHRUN, "--standalone", "--nnodes", "1", "--nproc-per-node", str(nproc),
            "--log-dir", str(log_dir), "-m", ENTRY, str(script), *args]


def run_script(script, nproc: int = 1, args: list[str] = (), device: str = "cpu", timeout_s: float = 600,
               cwd=None) -> ScriptRun:
    """Run `script` on `nproc` processes (CPU: gloo and the compatibility layer; cuda: the GPUs as they
    are). Raises ScriptFailed with the script's last output lines if any rank fails or it times out."""
    import time

    script = Path(script).resolve()
    if not script.is_file():
        raise FileNotFoundError(f"no script at {script}")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join([str(paths.REPO_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU run never touches a GPU, even where one exists
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kit-script-") as logs:  # the agent's files, removed after
        try:
            done = subprocess.run(command(script, nproc, list(args), logs), cwd=cwd or script.parent, env=env,
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise ScriptFailed(f"{script.name} did not finish in {timeout_s:g} s") from exc
    output = done.stdout + done.stderr
    if done.returncode != 0:
        tail = "\n".join(line for line in output.splitlines() if line.strip())[-3000:]
        raise ScriptFailed(f"{script.name} on {nproc} processes failed (exit {done.returncode}):\n{tail}")
    return ScriptRun(script, nproc, list(args), output, time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description="run a torchrun script through the kit (CPU: gloo + compat)")
    parser.add_argument("script")
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    a = parser.parse_args()
    result = run_script(a.script, a.nproc, [x for x in a.args if x != "--"], a.device)
    print(result.output)


if __name__ == "__main__":
    main()
