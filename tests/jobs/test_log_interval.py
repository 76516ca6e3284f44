"""log_interval: metrics.jsonl gets a line every N iterations (and after the last), the losses on
those lines are the ones a job logging every iteration records (logging changes nothing Megatron
computes), the report card still passes on its summaries, and a NaN between two logged iterations
still stops the job at its own iteration (the grad norm Megatron's optimizer computes every step)."""
import math

import pytest

from helpers import launch

JOB = dict(device="cpu", progress=False, iters=10, micro_batch=2, global_batch=4, seq_len=32)


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return str(tmp_path_factory.mktemp("log-interval"))


def test_every_fifth_iteration_is_logged_and_the_card_passes(out):
    every = launch.run(**JOB, out=out, nproc=2)
    fifth = launch.run(**JOB, out=out, nproc=2, log_interval=5, save_interval=10)
    assert [m["iteration"] for m in fifth.metrics] == [5, 10]
    assert fifth.losses == [every.losses[4], every.losses[9]]  # exact: the same training
    assert all(m["step_time_s"] > 0 and m["tokens_per_s"] > 0 for m in fifth.metrics)
    report = fifth.report
    assert report["passed"] and report["summary"] == {"pass": 6, "fail": 0, "skipped": 2}, report
    checks = {c["name"]: c["evidence"] for c in report["checks"]}
    assert checks["no_nan_no_skip"]["iterations"] == 10
    assert checks["no_nan_no_skip"]["logged_loss"]["count"] == 2
    assert checks["backward"]["grad_norm"]["count"] == 10


def test_a_nan_between_logged_iterations_stops_the_job_at_its_iteration(out):
    with pytest.raises(launch.JobFailed) as err:
        launch.run(**JOB, out=out, log_interval=5, faults=["nan@3"])
    run = err.value.run
    assert "grad norm is nan at iteration 3" in str(err.value), str(err.value)
    assert run.metrics == []  # stopped before the first logged iteration
    checks = {c["name"]: c for c in run.report["checks"]}
    assert checks["no_nan_no_skip"]["status"] == "fail" and "iteration 3" in checks["no_nan_no_skip"]["evidence"]
    norms = checks["backward"]["evidence"]["grad_norm"]
    assert norms["count"] == 3 and norms["last_iteration"] == 3 and math.isnan(norms["last"])
