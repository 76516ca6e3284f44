"""The round trip's page (docs/results/megatron_lm_roundtrip.md) is its raw results rendered: the
results.json the page names, through benchmarks/megatron_lm/roundtrip_page.py, gives the page byte for
byte; and the comparison of two runs holds a pair to the bf16 bound by its largest difference."""
import json
import re

from benchmarks.megatron_lm import roundtrip, roundtrip_page


def test_the_page_is_its_named_results_rendered():
    page = roundtrip.PAGE.read_text()
    source = re.search(r"Raw: `([^`]+)`", page).group(1)
    results = json.loads((roundtrip.REPO_ROOT / source).read_text())
    assert roundtrip_page.render_page(results, source, roundtrip.DEVICE_COMMAND, roundtrip.CARRIED_WHEELS) == page


def test_a_pair_is_within_the_bound_by_its_largest_difference():
    ref = {"iterations": [1, 2, 3], "losses": [10.0, 9.0, 8.0], "valid": {"loss": 7.0}}
    close = {"iterations": [2, 3, 4], "losses": [9.0 * (1 + 4e-3), 8.0, 7.5], "valid": {"loss": 7.0 * (1 - 9e-3)}}
    c = roundtrip_page.compare(ref, close)
    assert c["iterations"] == [2, 3] and c["at_iteration"] == 2
    assert abs(c["max_relative"] - 4e-3) < 1e-12 and abs(c["valid"]["relative"] - 9e-3) < 1e-12
    assert c["within_bound"] is True
    far = {**close, "valid": {"loss": 7.0 * (1 + 2 * roundtrip_page.BF16_BOUND)}}
    assert roundtrip_page.compare(ref, far)["within_bound"] is False  # the validation loss alone decides it


def test_a_comparison_with_a_failed_run_names_it_missing():
    runs = {"kit": {"iterations": [1], "losses": [5.0]}, "megatron_lm": {"error": "exit 1"}}
    rows = {(r["reference"], r["other"]): r for r in roundtrip_page.comparisons(runs, 1)}
    assert rows[("kit", "megatron_lm")]["missing"] == ["megatron_lm"]
    assert "not compared: Megatron-LM failed" in roundtrip_page.comparison_table({"runs": runs,
                                                                                 "comparisons": list(rows.values())})
