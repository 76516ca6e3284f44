"""The advisor's time model against NVIDIA's published Megatron-Bridge throughput
(benchmarks/advisor/bridge_table.py): every row is expressed or named with its reason, the page
docs/results/advisor_bridge.md reports what the model gives today, and the errors stay where that
page puts them. Skipped where $KIT_DATA_DIR lacks megatron_bridge_perf/pretrain_performance.csv. No
processes."""
import re
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.advisor import bridge_rows, bridge_table
from helpers.perf import calibration

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
    assert reasons == {"Nemotron_3_Super: no published configuration in the kit"}, reasons
    assert all(r.predicted for r in results if r.row.precision == "NVFP4" and r.row.family != "Nemotron_3_Super")


def test_a_rows_recipe_settings_reach_the_time_model_and_the_planner():
    """bridge_rows.RECIPES: a row whose layout is its recipe's runs the recipe's settings (the expert
    all-to-all overlap in the Execution; recompute modules and offloading in the Training); another
    layout of the same model and system runs none; every row reduces gradients in bf16."""
    row = bridge_rows.Published("26.04", "DGX-H100", "Qwen3_235B_a22B", 256, "FP8", 8192, 1, 4096, 0, 2, 8, 1, 4, 32,
                                1686.0)
    m, lay, training, gpu = bridge_rows.expressed(row)
    assert bridge_rows.precision_execution(training, row).ep_overlap and not training.grad_reduce_in_fp32
    other = replace(row, vp=None)
    assert not bridge_rows.precision_execution(bridge_rows.expressed(other)[2], other).ep_overlap
    oss = bridge_rows.Published("26.04", "DGX-GB200", "GPT OSS 120B", 64, "BF16", 1280, 4, 4096, 0, 1, 1, 1, None, 64,
                                15938.0)
    training = bridge_rows.expressed(oss)[2]
    assert (training.recompute, training.recompute_modules) == ("selective", ("layernorm", "moe_act"))
    llama = bridge_rows.Published("26.04", "DGX-GB300", "LLAMA3_70B", 64, "FP8", 256, 2, 8192, 64, 1, 1, 1, None, 1,
                                  5243.0)
    assert bridge_rows.expressed(llama)[2].offload_layers == 20
    nvfp4 = replace(llama, precision="NVFP4", fsdp=0, pp=4, vp=5, mbs=1)
    training = bridge_rows.expressed(nvfp4)[2]
    assert training.precision == "fp8" and bridge_rows.precision_execution(training, nvfp4).precision == "fp4"


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
    """A guard against regressions, at the page's numbers (median 12%, 90th percentile 34%)."""
    s = bridge_table.summary(results)
    assert s["median_abs_error"] <= 0.12 and s["p90_abs_error"] <= 0.345


def test_the_fitted_constant_holds_with_each_moe_model_held_out():
    """The MoE host time the calibration carries is the fit on every MoE row, and with each MoE model
    held out (fitted on the others) every expressed row is within the aim: median |error| 15%, 90th
    percentile 35%."""
    fitted = bridge_table.fit(bridge_table.read(PATH))
    assert fitted["all_rows_ms"] == pytest.approx(calibration.MOE_HOST_S * 1e3)
    assert fitted["rows"] == 150
    assert fitted["median_abs_error"] <= 0.15 and fitted["p90_abs_error"] <= 0.35
