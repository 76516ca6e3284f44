"""The advisor's single-GPU choices against one H200 (benchmarks/advisor/h200_choices.py): the comparison
on made-up measurements and made-up predictions whose ranks are known (Spearman, order, swaps, best,
fits), the merge of several measurement files and its refusals, and the recorded measurements against
the advisor today as the two results pages report them. No processes, no GPU."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks.advisor import h200_choices

ROOT = Path(__file__).resolve().parents[2]

# (micro batch, recompute): (predicted step s, planned GiB, predicted to fit)
PREDICTED = {(1, "none"): (4.0, 20.0, True), (2, "none"): (3.0, 30.0, True), (4, "none"): (2.0, 50.0, True),
             (8, "none"): (1.0, 90.0, True), (16, "none"): (0.5, 170.0, False)}


def fake_predictions(name, fused_accumulation=True):
    return {key: SimpleNamespace(step=SimpleNamespace(step_s=s), memory_gib=gib, fits=fits)
            for key, (s, gib, fits) in PREDICTED.items()}


def row(micro, step_s=None, reserved_gib=None, recompute="none"):
    """One choice as --measure records it: a median step and reserved peak, or out of memory."""
    if step_s is None:
        return {"fits": False, "micro_batch": micro, "recompute": recompute}
    return {"step_time_s": step_s, "step_times_s": [3 * step_s, step_s, step_s, step_s],
            "max_reserved_bytes": int(reserved_gib * 2**30), "fits": True, "micro_batch": micro, "recompute": recompute}


def measurement(models, gpu="NVIDIA H200", torch="2.11.0", date="2026-01-01", command="python -m x"):
    return {"gpu": gpu, "torch": torch, "date": date, "commands": [command], "models": models}


# Measured: mb2 faster than mb4 (the advisor says the reverse), mb16 out of memory as predicted.
# Predicted order of the four that fit: mb8, mb4, mb2, mb1; measured: mb8, mb2, mb4, mb1;
# Spearman = 1 - 6 * (1 + 1) / (4 * (16 - 1)) = 0.8.
ONE_SWAP = [row(1, 4.4, 19.0), row(2, 1.9, 28.0), row(4, 2.1, 47.0), row(8, 1.1, 85.0), row(16)]


@pytest.fixture
def fake_advisor(monkeypatch):
    monkeypatch.setattr(h200_choices, "predictions", fake_predictions)


def test_one_swap_gives_spearman_0_8_and_names_the_pair(fake_advisor):
    r = h200_choices.compare(measurement({"gpt-1.4b": ONE_SWAP}))["gpt-1.4b"]
    assert r["spearman"] == pytest.approx(0.8)
    assert r["same_order"] is False
    assert r["swapped"] == [("mb4 none", "mb2 none")]  # predicted faster first
    assert (r["predicted_best"], r["measured_best"]) == ("mb8 none", "mb8 none")
    assert r["fits_agree"] is True
    by_choice = {h200_choices.choice(t): t for t in r["rows"]}
    assert by_choice["mb4 none"]["measured_reserved_gib"] == pytest.approx(47.0, abs=1e-6)
    assert by_choice["mb16 none"]["measured_s"] is None and by_choice["mb16 none"]["fits"] is False


def test_the_same_order_gives_spearman_1(fake_advisor):
    measured = [row(1, 4.4, 19.0), row(2, 3.3, 28.0), row(4, 2.2, 47.0), row(8, 1.1, 85.0), row(16)]
    r = h200_choices.compare(measurement({"gpt-1.4b": measured}))["gpt-1.4b"]
    assert r["spearman"] == pytest.approx(1.0)
    assert r["same_order"] is True and r["swapped"] == []


def test_the_reverse_order_gives_spearman_minus_1_and_another_best(fake_advisor):
    measured = [row(1, 1.0, 19.0), row(2, 2.0, 28.0), row(4, 3.0, 47.0), row(8, 4.0, 85.0), row(16)]
    r = h200_choices.compare(measurement({"gpt-1.4b": measured}))["gpt-1.4b"]
    assert r["spearman"] == pytest.approx(-1.0)
    assert (r["predicted_best"], r["measured_best"]) == ("mb8 none", "mb1 none")
    assert len(r["swapped"]) == 6  # every pair of the four


def test_a_choice_that_fits_against_the_prediction_is_flagged_and_left_out_of_the_ranking(fake_advisor):
    """mb16 was predicted not to fit, but ran, fastest of all: the fits disagree, and the order and best
    are those of the choices both sides say fit."""
    measured = ONE_SWAP[:4] + [row(16, 0.6, 130.0)]
    r = h200_choices.compare(measurement({"gpt-1.4b": measured}))["gpt-1.4b"]
    assert r["fits_agree"] is False
    assert r["measured_best"] == "mb8 none"
    assert r["spearman"] == pytest.approx(0.8)


def test_the_summary_reports_the_comparison(fake_advisor, tmp_path):
    f = tmp_path / "choices.json"
    f.write_text(json.dumps(measurement({"gpt-1.4b": ONE_SWAP})))
    [line] = [x for x in h200_choices.summary([f]) if x.startswith("| gpt-1.4b")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1:6] == ["5 (4)", "0.80", "no: mb4 none predicted faster than mb2 none, measured 10.5% slower",
                          "mb8 none / mb8 none", "5 of 5"]


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_files_of_one_machine_merge_into_one_measurement(tmp_path):
    a = write(tmp_path, "a.json", measurement({"gpt-1.4b": ONE_SWAP}, date="2026-01-02", command="first"))
    b = write(tmp_path, "b.json", measurement({"llama3-8b-l16": [row(1, 3.0, 90.0)]}, date="2026-01-01",
                                              command="second"))
    m = h200_choices.merged([a, b])
    assert set(m["models"]) == {"gpt-1.4b", "llama3-8b-l16"}
    assert m["commands"] == ["first", "second"]
    assert m["date"] == "2026-01-02"


def test_files_of_two_gpus_are_refused(tmp_path):
    a = write(tmp_path, "a.json", measurement({"gpt-1.4b": ONE_SWAP}))
    b = write(tmp_path, "b.json", measurement({"llama3-8b-l16": [row(1, 3.0, 90.0)]}, gpu="NVIDIA A100"))
    with pytest.raises(SystemExit, match=r"measured on gpu 'NVIDIA A100'.*one machine only"):
        h200_choices.merged([a, b])


def test_files_of_two_executions_are_refused(tmp_path):
    """A file --measure writes now (weight gradients accumulated by the GEMM) and one from before
    (without the field: added after it) are predicted differently, so they are not merged."""
    a = write(tmp_path, "a.json", measurement({"gpt-1.4b": ONE_SWAP}))
    b = write(tmp_path, "b.json", dict(measurement({"llama3-8b-l16": [row(1, 3.0, 90.0)]}),
                                       gradient_accumulation_fusion=True))
    with pytest.raises(SystemExit, match=r"b.json: measured with gradient_accumulation_fusion True.*one execution"):
        h200_choices.merged([a, b])


def test_a_model_in_two_files_is_refused(tmp_path):
    a = write(tmp_path, "a.json", measurement({"gpt-1.4b": ONE_SWAP}))
    b = write(tmp_path, "b.json", measurement({"gpt-1.4b": ONE_SWAP}))
    with pytest.raises(SystemExit, match=r"\['gpt-1.4b'\] measured twice; pass each model's file once"):
        h200_choices.merged([a, b])


def test_a_model_the_advisor_does_not_know_is_refused():
    with pytest.raises(SystemExit, match=r"\['gpt-9b'\] unknown here"):
        h200_choices.compare(measurement({"gpt-9b": ONE_SWAP}))


@pytest.fixture(scope="module")
def recorded():
    measured = h200_choices.merged([ROOT / f for f in h200_choices.RECORDED])
    return measured, h200_choices.compare(measured)


def test_the_advisor_picks_the_measured_best_and_every_fit_on_the_recorded_h200(recorded):
    _, result = recorded
    assert set(result) == set(h200_choices.MODELS)
    for name, r in result.items():
        assert r["predicted_best"] == r["measured_best"], name
        assert r["fits_agree"], name
        assert r["spearman"] >= 0.95, name


def test_the_results_pages_report_what_the_advisor_gives_today(recorded):
    measured, result = recorded
    page = (ROOT / h200_choices.PAGE).read_text()
    assert page == h200_choices.markdown(measured, result, " ".join(h200_choices.RECORDED)), (
        f"regenerate {h200_choices.PAGE} with the command it names")
    advisor = (ROOT / "docs" / "results" / "advisor.md").read_text().splitlines()
    missing = [line for line in h200_choices.summary() if line and line not in advisor]
    assert not missing, "regenerate docs/results/advisor.md: python -m benchmarks.advisor.vtrain_check --fit --write ..."
