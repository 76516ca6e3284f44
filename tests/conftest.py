import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest


@pytest.fixture
def runs(tmp_path):
    """Job keyword arguments shared by the CPU tests: run directories under tmp, no progress bar."""
    return dict(out=str(tmp_path / "runs"), device="cpu", progress=False)


@pytest.fixture(scope="session")
def two_at_a_time():
    """`two_at_a_time(job, keys)` -> {key: job(key), or the exception it raised}, in the keys' order:
    independent jobs (1-2 ranks, mostly process start, one core's work for much of it) two at a
    time, so both cores work. An exception is kept, not raised, so one failing job fails only the
    parametrized test that checks it (that test raises it again), not the fixture of them all."""
    def run(job, keys):
        def kept(key):
            try:
                return job(key)
            except Exception as e:  # raised again by that key's own test
                return e

        keys = list(keys)
        with ThreadPoolExecutor(max_workers=2) as pool:
            return dict(zip(keys, pool.map(kept, keys)))
    return run


@pytest.fixture(scope="session")
def triton_interpreter():
    """`triton_interpreter(script)` -> the JSON object a test module's `__main__` prints last, the
    script run in a child process under Triton's interpreter (TRITON_INTERPRET=1 is read when
    @triton.jit decorates, so it must be set before the kernel module is imported): how the GPU
    kernels' tests run them on CPU. Skipped where triton is not installed."""
    pytest.importorskip("triton")
    root = str(Path(__file__).resolve().parents[1])

    def run(script, timeout=120):
        env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": root}
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                              timeout=timeout)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])
    return run


def pytest_configure(config):
    # Quiet the warnings Megatron-Core prints at import (apex/TE missing, deprecations).
    os.environ.setdefault("PYTHONWARNINGS", "ignore")


def pytest_xdist_make_scheduler(config, log):
    """How `make test` shares the tests between its two pytest-xdist workers (`-n 2`): a file's
    tests stay together (their module fixtures train once), and each lesson is a unit of its own
    (one papermill run each), so while one worker waits on a job's ranks the other keeps the second
    core busy. (pytest-xdist's own `loadgroup` marks do not reach its scheduler under pytest 9.)"""
    from xdist.scheduler import LoadScopeScheduling

    class FileOrLesson(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            return nodeid if file.endswith("notebooks/test_notebooks.py") else file

    return FileOrLesson(config, log)
