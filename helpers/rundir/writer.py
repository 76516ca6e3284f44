"""Worker-side writing of the run directory: per-rank logs, metrics (rank 0), error and heartbeat
files, atomic JSON. Plain Python (no torch), so the file formats live next to their names
(helpers/rundir/names.py) and the reader (reader.py); the collectives that gather what rank 0
writes live on the worker side (helpers/runtime/measure/gather.py)."""
from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

from helpers.rundir import names


def redirect_output(run_dir: Path, rank: int) -> None:
    """Send this process's stdout/stderr (Python and C++) to logs/rank<N>.log."""
    log = open(Path(run_dir) / names.rank_log(rank), "a", buffering=1)
    sys.stdout.flush(), sys.stderr.flush()
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log


def write_json(path: Path, obj) -> None:
    """Atomic: readers never see a half-written file."""
    tmp = Path(str(path) + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    tmp.replace(path)


def append_jsonl(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def write_error(run_dir: Path, rank: int, exc: BaseException, **facts) -> None:
    """logs/rank<N>.error.json: the exception, its traceback, and facts the worker knows about
    where it happened (e.g. `in_collective`: the collective the rank was waiting in)."""
    write_json(Path(run_dir) / names.rank_error(rank), {
        "rank": rank, "type": type(exc).__name__, "message": str(exc),
        "traceback": traceback.format_exc(), **{k: v for k, v in facts.items() if v is not None},
    })


class Metrics:
    """Rank 0 appends one JSON line per logged iteration, flushed so the runner can follow it."""

    def __init__(self, run_dir: Path, enabled: bool):
        self._f = open(Path(run_dir) / names.METRICS, "a", buffering=1) if enabled else None

    def write(self, record: dict) -> None:
        if self._f:
            self._f.write(json.dumps(record) + "\n")


class Heartbeat:
    """Each rank records how far it got (logs/rank<N>.heartbeat.json). When a job hangs, the
    ranks that are furthest behind are the stalled ones; the runner names them.

    A call only notes the phase (the training loop calls it several times per iteration); a
    background thread writes the newest one at most once every `period_s`, so a rank that stops
    moving has its last phase on disk within that time, and the runner's stall watchdog
    (launch/torchrun.watch, stall_timeout_s) sees the steps stop. The thread keeps writing while
    the rank's main thread is stuck: sleeping, or waiting inside a collective."""

    def __init__(self, run_dir: Path, rank: int, period_s: float = 1.0):
        self._path = Path(run_dir) / names.heartbeat(rank)
        self._step = 0
        self._latest: dict | None = None  # replaced by each call, never edited: one reference is one state
        self._written: dict | None = None
        self._lock = threading.Lock()
        self._period_s = period_s
        threading.Thread(target=self._keep_writing, name="kit-heartbeat", daemon=True).start()

    def __call__(self, phase: str, iteration: int = 0) -> None:
        self._step += 1
        self._latest = {"step": self._step, "phase": phase, "iteration": iteration, "time": time.time()}

    def flush(self) -> None:
        """Write the newest phase now (before an error file, or for a reader that needs it at once)."""
        with self._lock:
            latest = self._latest
            if latest is not self._written:
                write_json(self._path, latest)
                self._written = latest

    def _keep_writing(self) -> None:
        while True:
            self.flush()
            time.sleep(self._period_s)
