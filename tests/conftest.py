import os
from concurrent.futures import ThreadPoolExecutor

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


def pytest_configure(config):
    # Quiet the warnings Megatron-Core prints at import (apex/TE missing, deprecations).
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
