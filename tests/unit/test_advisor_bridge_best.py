"""The published Megatron-Bridge layouts against the advisor's pick (benchmarks/advisor/bridge_best.py):
one case per (model, system, GPUs, precision) from its newest release, the pick's ratio and the
10% line, the reason named from the terms the published layout spends more on, and the page's
section agreeing with its own rows. No processes."""
import re
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.advisor import bridge_best, bridge_rows
from helpers.advisor.time.step import TERMS, StepTime

DOC = Path(__file__).resolve().parents[2] / "docs" / "results" / "advisor_bridge.md"
ROW = bridge_rows.Published("25.11", "DGX-H100", "LLAMA3_8B", 8, "FP8-CS", 128, 1, 8192, 0, 1, 1, 1, None, 1, 14451.0)


def _step(tokens_per_s: float, **terms) -> StepTime:
    full = {k: 0.0 for k in TERMS}
    full.update(terms)
    return StepTime(sum(full.values()), tokens_per_s, full)


def test_the_newest_release_stands_for_its_case():
    older = replace(ROW, release="25.09", tp=2)
    newer = replace(ROW, release="26.02.01", pp=2)
    other = replace(ROW, precision="BF16", release="25.09")
    assert bridge_best.newest([older, newer, other]) == [newer, other]
    assert bridge_best.newest([newer, replace(ROW, release="26.02")]) == [newer]  # 26.02.01 after 26.02


def test_the_ratio_and_the_ten_percent_line():
    published = _step(1000.0, gemm=1.0)

    def case(best_tokens):
        best = bridge_best.Row(None, None, step=_step(best_tokens, gemm=1.0))
        return bridge_best.Case(ROW, published, 50.0, 80.0, best)

    assert case(1100.0).ratio == pytest.approx(1.1) and case(1100.0).within
    assert not case(1101.0).within
    assert case(900.0).within  # the published layout predicted faster than the pick
    assert not bridge_best.Case(ROW, published, 50.0, 80.0, None).within  # nothing fits: no ratio


def test_the_reason_names_the_largest_terms_the_published_layout_spends_more_on():
    published = _step(1.0, gemm=5.0, tp=1.5, bubble=0.8, dp=0.1)
    best = _step(1.5, gemm=4.9, tp=0.2, bubble=0.1, dp=0.2, recompute=0.05)
    text = bridge_best.reason(published, best)
    assert text == "less TP traffic (1.30 s), a smaller pipeline bubble (0.70 s)"
    # a term under a tenth of the whole difference is left out
    assert bridge_best.reason(_step(1.0, tp=1.0, gemm=0.05), _step(2.0)) == "less TP traffic (1.00 s)"


def test_the_words_cover_every_term():
    assert set(bridge_best.WORDS) == set(TERMS)


@pytest.mark.skipif(not DOC.exists(), reason="no results page")
def test_the_pages_section_counts_its_own_rows():
    text = DOC.read_text()
    part = text[text.index("## The published layout against the advisor's pick"):text.index("## Every row")]
    within, total = map(int, re.search(r"(\d+) of (\d+) cases: the published layout is predicted within 10%",
                                       part).groups())
    rows = [line.split("|") for line in part.splitlines() if line.startswith("| DGX")]
    assert len(rows) == total
    picked = [(float(r[11]), r[12].strip()) for r in rows if r[11].strip()]
    # every case beyond the line says why, and none within it does (ratios printed to two places)
    assert sum(not why for _, why in picked) == within
    assert all(ratio <= 1.105 for ratio, why in picked if not why)
    assert all(ratio >= 1.095 and len(why) > 10 for ratio, why in picked if why)
    beyond, over = map(int, re.search(r"Of the (\d+) cases beyond the line, (\d+) have", part).groups())
    assert beyond == sum(bool(why) for _, why in picked)
    assert over == sum("over the GPU's" in why for _, why in picked)
