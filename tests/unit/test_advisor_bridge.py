"""The advisor's time model against NVIDIA's published Megatron-Bridge throughput
(benchmarks/advisor/bridge_table.py): every row is expressed or named with its reason, the page
docs/results/advisor_bridge.md reports what the model gives today, and the errors stay where that
page puts them. Skipped where $KIT_DATA_DIR lacks megatron_bridge_perf/pretrain_performance.csv. No
processes."""
import re
from pathlib import Path

import pytest

from benchmarks.advisor import bridge_table

PATH = bridge_table.data_path()
DOC = Path(__file__).resolve().parents[2] / "docs" / "results" / "advisor_bridge.md"
pytestmark = pytest.mark.skipif(PATH is None, reason="KIT_DATA_DIR has no megatron_bridge_perf/")


@pytest.fixture(scope="module")
def results():
    return bridge_table.evaluate(bridge_table.read(PATH))


def test_every_row_is_predicted_or_named_with_its_reason(results):
    assert len(results) == 158
    assert all((r.predicted is None) == bool(r.reason) for r in results)
    reasons = {r.reason for r in results if r.reason}
    assert reasons <= {"precision NVFP4: the time model has no GEMM rate for it",
                       "Nemotron_3_Super: no published configuration in the kit"}, reasons


def test_the_results_page_reports_what_the_model_gives(results):
    text = DOC.read_text()
    s = bridge_table.summary(results)
    median = float(re.search(r"Median \|error\| of tokens/s/GPU: (\d+)%", text).group(1))
    assert round(s["median_abs_error"] * 100) == median
    rows = [line for line in text[text.index("## Every row"):].splitlines() if re.match(r"\| [\d.]+ \| DGX", line)]
    assert len(rows) == len(results)
    for line, r in zip(rows, results):
        cell = line.split("|")[8].strip()
        assert cell == ("—" if r.predicted is None else f"{r.predicted:,.0f}"), line


def test_the_errors_stay_where_the_page_puts_them(results):
    """A guard against regressions, at the page's numbers (median 15%, 90th percentile 38%), not the
    aim (15% and 35% with every MoE model held out)."""
    s = bridge_table.summary(results)
    assert s["median_abs_error"] <= 0.155 and s["p90_abs_error"] <= 0.38
