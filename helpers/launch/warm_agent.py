"""Warm torchrun agents: CPU jobs start in about a second instead of four.

A CPU job's torchrun (launch/torchrun.py `command`) spends its first seconds importing: the agent
imports torch, and its forkserver imports torch, Megatron-Core and the kit's worker before it forks
the ranks (runtime/rank_imports.py). Measured on the 2-core machine: ~3.8 s of a 4.9 s tiny job.
Every job of a notebook or a test session imports the same modules again.

Here one process per (preloaded modules, environment) imports them once and stays: the *zygote*.
For each job it forks; the fork is that job's torchrun agent: it takes the job's environment, working
folder and log file, starts a session of its own (one process group: `torchrun.kill_group` stops
the agent and every rank, as for a cold agent), forks its forkserver from itself (with everything
already imported, the job's environment set, and no thread running yet) and runs torchrun's own
`main()` with the job's arguments, unchanged: `--start-method forkserver --run-path train.py`, the
same rendezvous, the same ranks, the same exit code. Only the interpreter is warm.

What a cold agent does that this does not: nothing the ranks see. Imports made at the zygote's start
read its environment, which is the job's (one zygote per environment). GPU jobs, jobs with injected
faults and multi-node agents start cold (torchrun.rank_preload, runner.execute). `KIT_WARM_AGENT=0`
turns this off.

The zygote reads one JSON request per line on stdin and answers on stdout: the agent itself writes
`started PID` once it leads its own session; the zygote writes `exited PID CODE` when it reaps it.
It exits when its stdin closes (the notebook or test process that started it ended)."""
from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from helpers.job import paths

ENABLED_ENV = "KIT_WARM_AGENT"
START_TIMEOUT_S = 120  # the zygote's imports on a loaded 2-core machine


def enabled() -> bool:
    return os.environ.get(ENABLED_ENV, "1") != "0"


# ---- the zygote's side -------------------------------------------------------------------------
def _fork_forkserver() -> None:
    """multiprocessing's forkserver for this agent, forked from this process (not spawned as a new
    interpreter that would import everything again): the state `forkserver.ensure_running` leaves,
    so torch's `start_processes(start_method="forkserver")` uses it as it would its own."""
    from multiprocessing import connection, forkserver

    listener = socket.socket(socket.AF_UNIX)
    address = connection.arbitrary_address("AF_UNIX")
    listener.bind(address)
    os.chmod(address, 0o600)
    listener.listen()
    alive_r, alive_w = os.pipe()  # the server exits when every holder of alive_w has
    pid = os.fork()
    if pid == 0:
        os.close(alive_w)
        try:
            forkserver.main(listener.fileno(), alive_r, [])
        finally:
            os._exit(0)
    os.close(alive_r)
    listener.close()
    server = forkserver._forkserver
    server._forkserver_address, server._forkserver_alive_fd, server._forkserver_pid = address, alive_w, pid


def _agent(request: dict, answers_fd: int) -> None:
    """The forked agent: the job's session, files and environment, then torchrun's main(); never returns."""
    try:
        os.setsid()
        os.write(answers_fd, f"started {os.getpid()}\n".encode())
        os.close(answers_fd)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(devnull)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["torchrun", *request["args"]]
        _fork_forkserver()
        from helpers.launch import torchrun_main

        torchrun_main.run_torchrun()  # os._exit with torchrun's exit code
    except BaseException:  # e.g. the forkserver's socket path too long for a long TMPDIR: said in the job's log
        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(1)


def serve(preload: list[str]) -> None:
    """The zygote: import once, then fork an agent per request and report each one's exit."""
    from helpers.job import import_phase

    with import_phase.without_gc():
        import importlib

        import torch.distributed.run  # noqa: F401  the agent's own imports

        for name in preload:
            importlib.import_module(name)
    answers = sys.stdout.fileno()
    os.write(answers, b"ready\n")
    requests = sys.stdin.fileno()
    pending = b""
    while True:
        readable, _, _ = select.select([requests], [], [], 0.02)
        if readable:
            chunk = os.read(requests, 65536)
            if not chunk:
                return  # the process that started this zygote has ended
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if os.fork() == 0:
                    _agent(json.loads(line), answers)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            os.write(answers, f"exited {pid} {os.waitstatus_to_exitcode(status)}\n".encode())


# ---- the caller's side -------------------------------------------------------------------------
class Zygote:
    """One warm process: started with `env`, importing `preload`; forks agents on request."""

    def __init__(self, preload: tuple[str, ...], env: dict):
        # its own output (import warnings; an import error) in a file, named when it fails: not in the notebook
        # (a file without a name: nothing is left behind even when this process is killed)
        self.log = tempfile.TemporaryFile("w+", prefix="kit-warm-agent-", suffix=".log")
        self.proc = subprocess.Popen([sys.executable, "-m", __name__, ",".join(preload)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=env, cwd=paths.REPO_ROOT,
                                     start_new_session=True)
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.buffer = b""
        self.codes: dict[int, int] = {}
        self.running: set[int] = set()
        self.lock = threading.Lock()
        self._expect("ready", START_TIMEOUT_S)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read(self, timeout: float) -> list[str]:
        """Lines the zygote or its agents wrote, waiting up to `timeout` for the first."""
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return []
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return []
        if not chunk:
            raise RuntimeError(self._exited())
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        out = []
        for line in lines:
            word, *rest = line.decode().split()
            if word == "exited":
                pid, code = int(rest[0]), int(rest[1])
                self.codes[pid] = code
                self.running.discard(pid)
            out.append(line.decode())
        return out

    def _expect(self, word: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self._read(deadline - time.monotonic()):
                if line.split()[0] == word:
                    return line
            if not self.alive():
                raise RuntimeError(self._exited())
        raise RuntimeError(f"the warm agent process did not answer '{word}' within {timeout:.0f} s")

    def start(self, args: list[str], env: dict, log_path: Path, cwd: Path) -> WarmAgent:
        with self.lock:
            request = {"args": args, "env": env, "log": str(log_path), "cwd": str(cwd)}
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            pid = int(self._expect("started", 30).split()[1])
            self.running.add(pid)
        return WarmAgent(self, pid, args)

    def poll(self, pid: int, timeout: float = 0.0) -> int | None:
        with self.lock:
            if pid not in self.codes:
                self._read(timeout)
            return self.codes.get(pid)

    def _exited(self) -> str:
        self.log.seek(0)
        return (f"the warm agent process exited (code {self.proc.poll()}); its output:\n{self.log.read()[-3000:]}"
                f"\n(KIT_WARM_AGENT=0 starts every job cold)")

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


class WarmAgent:
    """The forked agent as runner and torchrun.watch use a `subprocess.Popen`: pid (it leads its own
    process group), poll(), wait(timeout), returncode."""

    log = None

    def __init__(self, zygote: Zygote, pid: int, args: list[str]):
        self.zygote, self.pid, self.args, self.returncode = zygote, pid, args, None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.poll(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = 0.2 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = self.zygote.poll(self.pid, min(left, 0.2))
        return self.returncode


_zygotes: dict[tuple, Zygote] = {}
_choosing = threading.Lock()
KEEP = 2  # zygotes kept per process (each holds torch and Megatron-Core: a few hundred MB)


def start(preload: list[str], args: list[str], env: dict, log_path: Path) -> WarmAgent:
    """A torchrun agent for `args` (torchrun's arguments, without --preload), forked from the zygote
    for (preload, env), which starts here on first use."""
    with _choosing:  # jobs may start from several threads (a notebook's background job, a test's)
        zygote = _zygote_for(tuple(preload), env)
    return zygote.start(args, env, log_path, paths.REPO_ROOT)


def _zygote_for(preload: tuple[str, ...], env: dict) -> Zygote:
    key = (preload, tuple(sorted(env.items())))
    zygote = _zygotes.get(key)
    if zygote is not None and not zygote.alive():
        del _zygotes[key]
        zygote = None
    if zygote is None:
        for old_key in [k for k, z in _zygotes.items() if not z.running][: max(0, len(_zygotes) + 1 - KEEP)]:
            _zygotes.pop(old_key).close()
        zygote = _zygotes[key] = Zygote(preload, env)
    else:  # most recently used last
        _zygotes[key] = _zygotes.pop(key)
    return zygote


if __name__ == "__main__":
    serve([m for m in sys.argv[1].split(",") if m])
