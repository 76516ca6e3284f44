"""The smoke-test contract on real data, as report.json: continued pretraining on WikiText passes
all eight checks in two layouts (the 16-process 5D layout on the scaled control MoE model passes
them in notebooks/09_process_groups_5d.ipynb), SFT in two; layouts agree with each other on real data;
a rerun from the manifest reproduces the losses exactly; the validation loss falls; a NaN makes the card
fail, naming the iteration; and the run's TensorBoard events hold the numbers of its metrics.jsonl."""
import json
import subprocess
import sys

import pytest

from helpers import launch
from helpers.job import paths
from helpers.views import report_card

RTOL = 1e-5  # fp32 CPU equivalence bound (test_launch.py says why)
CPT = dict(data="wikitext", iters=4, micro_batch=2, global_batch=8, seq_len=64, eval_interval=2,
           eval_iters=1, save_interval=4)
SFT = dict(data="sft", iters=4, micro_batch=2, global_batch=4, seq_len=48, eval_iters=1, save_interval=4)


def _all_pass(run):
    report = run.report
    assert report is not None, run.path
    bad = {c["name"]: c["evidence"] for c in report["checks"] if c["status"] != "pass"}
    assert not bad and report["passed"] and report["summary"] == {"pass": 8, "fail": 0, "skipped": 0}, bad
    return report


def _valid_losses(run):
    return [e["loss"] for e in run.evaluations if e["split"] == "valid"]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return str(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def cpt_dp2(out):
    return launch.run(out=out, device="cpu", progress=False, nproc=2, dist_opt=True, **CPT)


def test_cpt_dp2_distopt_passes_every_check_and_validation_loss_falls(cpt_dp2):
    report = _all_pass(cpt_dp2)
    valid = _valid_losses(cpt_dp2)
    assert [e["iteration"] for e in cpt_dp2.evaluations] == [0, 2, 4, 4]  # valid x3, then test
    assert valid[-1] < valid[0] - 0.3, valid  # byte-level WikiText: ~ln(258)=5.55 at start
    data = next(c for c in report["checks"] if c["name"] == "data")["evidence"]
    assert data["splits"]["train"].startswith("first 90%") or data["splits"]["train"].startswith("WikiText")


def test_cpt_tp2_pp2_matches_dp2_on_real_data(cpt_dp2, out):
    run = launch.run(out=out, device="cpu", progress=False, tp=2, pp=2, **CPT)
    _all_pass(run)
    assert max(abs(a - b) / b for a, b in zip(run.losses, cpt_dp2.losses)) <= RTOL, (run.losses, cpt_dp2.losses)
    assert max(abs(a - b) / b for a, b in zip(_valid_losses(run), _valid_losses(cpt_dp2))) <= RTOL


def test_rerun_from_the_manifest_reproduces_the_losses_exactly(cpt_dp2):
    manifest = cpt_dp2.path / "manifest.json"
    assert json.loads(manifest.read_text())["data"]["pinned"]["data_dir"]
    out = subprocess.run([sys.executable, "-m", "helpers.launch", "--from-manifest", str(manifest)],
                         capture_output=True, text=True, cwd=paths.REPO_ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    again = launch.RunDir(out.stdout.strip().splitlines()[-1])
    assert again.path != cpt_dp2.path
    assert again.losses == cpt_dp2.losses  # exact, not approximate
    assert [e["loss"] for e in again.evaluations] == [e["loss"] for e in cpt_dp2.evaluations]
    assert "report card" in out.stdout and "PASSED" in out.stdout


@pytest.fixture(scope="module")
def sft_single(out):
    return launch.run(out=out, device="cpu", progress=False, **SFT)


def test_sft_single_passes_every_check(sft_single):
    report = _all_pass(sft_single)
    assert sft_single.manifest["data"]["format"].startswith("padded")
    assert sft_single.losses[-1] < sft_single.losses[0]
    assert "PASS" in report_card.text(report) and "<table>" in report_card.to_html(report)


def test_sft_dp2_passes_and_matches_one_process(sft_single, out):
    run = launch.run(out=out, device="cpu", progress=False, nproc=2, **SFT)
    _all_pass(run)
    assert max(abs(a - b) / b for a, b in zip(run.losses, sft_single.losses)) <= RTOL


def test_tensorboard_events_hold_the_same_numbers_as_metrics_jsonl(cpt_dp2):
    """Rank 0 of the two writes one event file beside metrics.jsonl; read back with TensorBoard's own
    reader it holds metrics.jsonl's loss, lr and grad norm at each iteration and validation.jsonl's
    losses (TensorBoard stores scalars as float32: each value is the float32 rounding of the record)."""
    import numpy as np
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from helpers.rundir import names

    assert len(list(cpt_dp2.path.glob(names.TENSORBOARD_EVENTS))) == 1
    events = EventAccumulator(str(cpt_dp2.path))
    events.Reload()

    def scalars(tag):
        return [(e.step, e.value) for e in events.Scalars(tag)]

    def f32(x):
        return float(np.float32(x))

    metrics = cpt_dp2.metrics
    assert len(metrics) == CPT["iters"]
    for tag, key in [("lm loss", "loss"), ("learning-rate", "lr"), ("grad-norm", "grad_norm")]:
        assert scalars(tag) == [(m["iteration"], f32(m[key])) for m in metrics], tag
    assert [v for _, v in scalars("lm loss")] == [f32(x) for x in cpt_dp2.losses]
    assert len(scalars("tokens-per-second")) == len(scalars("iteration-time")) == CPT["iters"]
    for split, tag in [("valid", "lm loss validation"), ("test", "lm loss test")]:
        assert scalars(tag) == [(e["iteration"], f32(e["loss"])) for e in cpt_dp2.evaluations if e["split"] == split]
