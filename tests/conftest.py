import os

import pytest


@pytest.fixture
def runs(tmp_path):
    """Job keyword arguments shared by the CPU tests: run directories under tmp, no progress bar."""
    return dict(out=str(tmp_path / "runs"), device="cpu", progress=False)


def pytest_configure(config):
    # Quiet the warnings Megatron-Core prints at import (apex/TE missing, deprecations).
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
