"""JobSpec.backend (helpers/job/backend.py): auto picks Transformer Engine only on GPU with TE
installed; an explicit 'te' that cannot be honoured is refused by the runner before any process
starts, with the fix in the message. (The TE path itself cannot run on this kit's machines.)"""
import importlib.util

import pytest

from helpers.errors import InvalidJob
from helpers.job import backend
from helpers.job.spec import JobSpec
from helpers.launch import runner


@pytest.fixture
def te_present(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "transformer_engine" else real(name, *a))


def test_auto_is_local_without_te_or_on_cpu(te_present):
    assert backend.resolve("auto", "cpu") == "local"
    assert backend.resolve("auto", "cuda") == "te"
    assert backend.resolve("local", "cuda") == "local"


def test_auto_without_te_is_local(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert backend.resolve("auto", "cuda") == "local"


def test_explicit_te_without_te_is_refused_before_start(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(InvalidJob, match="transformer_engine.*not installed.*backend='local'"):
        runner.resolve(JobSpec(device="cuda", backend="te"))
    with pytest.raises(InvalidJob, match="needs a GPU"):
        runner.resolve(JobSpec(device="cpu", backend="te"))


def test_runner_writes_the_decided_backend():
    assert runner.resolve(JobSpec(device="cpu")).backend == "local"
    with pytest.raises(ValueError, match="backend must be one of"):
        backend.resolve("tensorrt", "cuda")
