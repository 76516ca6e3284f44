"""The ideal pipeline schedule (views/schedule.ideal): Megatron's own 1F1B and interleaved order
run on unit-time steps. The bubble counted in the drawn schedule equals (p-1)/(v·m+p-1), every
microbatch's forward comes before its backward, and each virtual stage hands on to the next."""
import matplotlib
import pytest

matplotlib.use("Agg")

from helpers.views import schedule  # noqa: E402

# (p, m, v): plain 1F1B for any m (also m < p), interleaved with m a multiple of p (Megatron's
# microbatch groups of p: then the interleaved schedule is ideal).
CASES = [(2, 4, 1), (4, 4, 1), (4, 8, 1), (4, 2, 1), (3, 7, 1), (2, 4, 2), (4, 8, 2), (4, 4, 2), (3, 6, 2),
         (4, 8, 3), (2, 2, 2)]


@pytest.mark.parametrize("p,m,v", CASES)
def test_bubble_counted_in_the_schedule_is_the_formula(p, m, v):
    steps = schedule.ideal(p, m, v)
    window = max(e["slot"] for e in steps) + 1
    for s in range(p):
        busy = sum(e["stage"] == s for e in steps)
        assert busy == 2 * v * m  # every chunk's forward and backward of every microbatch, once
        assert window - busy == 2 * (p - 1)  # idle slots: (p-1) forward-lengths of fill, as many of drain
    assert schedule.ideal_bubble(steps) == pytest.approx({s: schedule.formula(p, m, v) for s in range(p)}, abs=1e-12)


@pytest.mark.parametrize("p,m,v", CASES)
def test_dependencies_hold(p, m, v):
    steps = schedule.ideal(p, m, v)
    at = {(e["kind"], e["chunk"] * p + e["stage"], e["microbatch"]): e["slot"] for e in steps}
    assert len(at) == len(steps) == 2 * p * v * m  # each (kind, virtual stage, microbatch) exactly once
    slots = [(e["stage"], e["slot"]) for e in steps]
    assert len(set(slots)) == len(slots)  # a stage does one thing at a time
    for (kind, vs, mb), slot in at.items():
        if kind == "F":
            assert slot < at[("B", vs, mb)]  # its forward before its backward, on every stage
            if vs + 1 < p * v:
                assert slot < at[("F", vs + 1, mb)]  # stage s's forward before stage s+1's
        elif vs + 1 < p * v:
            assert at[("B", vs + 1, mb)] < slot  # gradients flow back


@pytest.mark.parametrize("p,m", [(2, 4), (4, 4), (4, 8), (4, 2)])
def test_1f1b_warmup_and_in_flight_as_notebook_05_measures(p, m):
    """Stage s runs min(p-s, m) forwards before its first backward and never holds more."""
    for s in range(p):
        order = [k for k, _, _ in schedule.megatron_order(p, m, 1, s)]
        in_flight = peak = 0
        for k in order:
            in_flight += 1 if k == "F" else -1
            peak = max(peak, in_flight)
        assert order.index("B") == min(p - s, m) == peak


def test_interleaved_with_an_incomplete_microbatch_group_idles_more():
    """m not a multiple of p: Megatron's last microbatch group is shorter and the ideal schedule
    no longer reaches the formula (here 1/3 instead of 1/5)."""
    bubble = schedule.ideal_bubble(schedule.ideal(4, 6, 2))
    assert all(b == pytest.approx(1 / 3) for b in bubble.values())
    assert schedule.formula(4, 6, 2) == pytest.approx(0.2)


def test_plot_shows_the_counted_bubble():
    ax = schedule.plot_ideal(4, 8, 2)
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("bubble 16%") == 4 and sum(t.endswith("·1") for t in texts) == 2 * 4 * 8  # F and B of chunk 1
    assert "6 of 38 slots = 15.8%" in ax.get_title()
    matplotlib.pyplot.close("all")
