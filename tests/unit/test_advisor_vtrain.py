"""The advisor's time model against vTrain's published A100 measurements (benchmarks/advisor/vtrain_check.py):
the summary docs/results/advisor.md reports is what the model gives today, row by row and per
group, and the median error stays within the issue's 15% aim. Skipped where $KIT_DATA_DIR lacks
vtrain/ground_truth_multi.csv. No processes."""
import re
from pathlib import Path

import pytest

from benchmarks.advisor import vtrain_check

PATH = vtrain_check.data_path()
DOC = Path(__file__).resolve().parents[2] / "docs" / "results" / "advisor.md"
pytestmark = pytest.mark.skipif(PATH is None, reason="KIT_DATA_DIR has no vtrain/ground_truth_multi.csv")


@pytest.fixture(scope="module")
def result():
    rows = vtrain_check.load(PATH)
    return rows, vtrain_check.evaluate(rows)


def test_the_file_is_the_published_one(result):
    rows, _ = result
    assert len(rows) == 109
    assert {r.group for r in rows} == {"3.6B on 64 GPUs", "18.4B on 256 GPUs", "39.1B on 512 GPUs", "175B on 512 GPUs"}
    assert rows[0].tp == 1 and rows[0].dp == 64 and rows[0].measured_s == pytest.approx(3.5665)


def test_the_results_page_reports_what_the_model_gives(result):
    rows, res = result
    text = DOC.read_text()
    median = float(re.search(r"Median \|error\| over all 109 rows: \*\*([\d.]+)%", text).group(1))
    assert res["median_abs_error"] * 100 == pytest.approx(median, abs=0.05)
    for group, s in res["groups"].items():
        line = next(line for line in text.splitlines() if line.startswith(f"| {group} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert float(cells[2]) == pytest.approx(s["spearman"], abs=0.005), group
        assert int(cells[3]) == s["predicted_rank_of_best"], group
    every_row = text[text.index("## Every row"):]
    table = [line for line in every_row.splitlines() if re.match(r"\| [\d.]+B \| \d+ \|", line)]
    assert len(table) == len(rows)
    for line, p in zip(table, res["predicted"]):
        assert float(line.split("|")[9]) == pytest.approx(p, abs=0.005)


def test_the_median_error_is_within_the_aim(result):
    _, res = result
    assert res["median_abs_error"] <= 0.15
