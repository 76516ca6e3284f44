"""JobSpec.tensorboard: auto is decided once (on where the tensorboard package is installed), 'on'
without the package is refused before start with a fix, and the writer (helpers/runtime/measure/
tensorboard.py) writes metrics.jsonl's numbers under Megatron-LM's tag names, or, when off, imports
and writes nothing. The job-level check (events = metrics.jsonl of a real run) is in
tests/jobs/test_report.py."""
import subprocess
import sys

import numpy as np
import pytest

from helpers.job import rules
from helpers.job.rules.environment import Environment
from helpers.job.spec import JobSpec
from helpers.runtime.measure.tensorboard import TensorBoard

WITH, WITHOUT = Environment(tensorboard_installed=True), Environment(tensorboard_installed=False)
RECORDS = [{"iteration": i, "loss": 5.0 / i, "lr": 1e-3 * i, "grad_norm": 0.5 + i, "step_time_s": 0.25,
            "tokens_per_s": 1024.0, "mem_allocated_bytes": 2**30, "mem_max_reserved_bytes": 2**31} for i in (1, 2, 3)]


def test_auto_is_on_where_the_package_is_installed_and_a_choice_is_kept():
    assert rules.resolve(JobSpec(), WITH).spec.tensorboard == "on"
    assert rules.resolve(JobSpec(), WITHOUT).spec.tensorboard == "off"
    assert rules.resolve(JobSpec(tensorboard="off"), WITH).spec.tensorboard == "off"


def test_on_without_the_package_is_refused_before_start_with_a_fix():
    found = rules.check(rules.resolve(JobSpec(tensorboard="on"), WITHOUT), WITHOUT).violations
    assert [v.name for v in found] == ["tensorboard_not_installed"]
    assert "pip install tensorboard" in found[0].fix and "tensorboard='off'" in found[0].fix
    assert not rules.check(rules.resolve(JobSpec(tensorboard="on"), WITH), WITH).violations


def test_the_writer_holds_the_records_under_megatron_lm_tags(tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    board = TensorBoard(tmp_path, enabled=True)
    for r in RECORDS:
        board.iteration(r)
    board.evaluation([{"split": "valid", "iteration": 0, "loss": 6.0}, {"split": "valid", "iteration": 3, "loss": 2.5},
                      {"split": "test", "iteration": 3, "loss": 2.75}])
    events = event_accumulator.EventAccumulator(str(tmp_path))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {"lm loss", "learning-rate", "grad-norm", "iteration-time",
                                             "tokens-per-second", "mem-allocated-bytes", "mem-max-reserved-bytes",
                                             "lm loss validation", "lm loss test"}
    read = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    assert read["lm loss"] == [(r["iteration"], float(np.float32(r["loss"]))) for r in RECORDS]
    assert read["learning-rate"] == [(r["iteration"], float(np.float32(r["lr"]))) for r in RECORDS]
    assert read["lm loss validation"] == [(0, 6.0), (3, 2.5)] and read["lm loss test"] == [(3, 2.75)]


def test_off_imports_and_writes_nothing(tmp_path):
    """In a fresh interpreter: an off writer leaves the folder empty and never imports the writer's package."""
    code = ("import sys; from pathlib import Path; from helpers.runtime.measure.tensorboard import TensorBoard\n"
            f"b = TensorBoard(Path({str(tmp_path)!r}), enabled=False); b.iteration({RECORDS[0]!r}); b.evaluation([])\n"
            "print(sorted(m for m in sys.modules if m.startswith(('tensorboard', 'torch.utils.tensorboard'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]" and not list(tmp_path.iterdir())
