"""benchmarks/speed/precision.py compares the losses of two entries only when they trained on the same
tokens: same data, schedule, iterations, global batch and seed. A bf16 job at one seed ends ~9% from
bf16 at another on the documentation corpus (docs/results/precision.md), so an FP8 gap read across
seeds would be mostly which batches came last."""
from benchmarks.speed.precision import loss_gaps

SCHEDULE = {"lr_warmup_iters": 20, "lr_decay": "cosine", "min_lr": 3e-5}


def entry(final: float, test: float, **kw) -> dict:
    return {"final_loss_mean10": final, "test_loss": test, "iters": 200, "global_batch": 64, "micro_batch": 8,
            "data": {"tokens": 3212600}, "lr_schedule": SCHEDULE, **kw}


def test_a_pair_of_one_seed_gives_the_relative_gaps():
    gaps = loss_gaps(entry(3.0, 2.0, seed=4321), entry(3.03, 1.98, seed=4321))
    assert abs(gaps["final_loss"] - 0.01) < 1e-12 and abs(gaps["test_loss"] + 0.01) < 1e-12


def test_entries_of_two_seeds_are_compared_only_when_asked_for_the_seeds_spread():
    bf16, other = entry(3.3, 3.2, seed=1234), entry(3.6, 3.4, seed=4321)
    assert loss_gaps(bf16, other) is None
    assert abs(loss_gaps(bf16, other, across_seeds=True)["final_loss"] - (3.6 / 3.3 - 1)) < 1e-12


def test_an_entry_without_a_recorded_seed_ran_with_jobspecs_default():
    old = entry(3.3, 3.2)  # written before entries recorded their seed
    assert loss_gaps(old, entry(3.4, 3.3, seed=1234)) is not None
    assert loss_gaps(old, entry(3.4, 3.3, seed=4321)) is None


def test_other_schedules_or_lengths_are_not_compared():
    assert loss_gaps(entry(3.3, 3.2), entry(3.4, 3.3, lr_schedule=None)) is None
    assert loss_gaps(entry(3.3, 3.2), entry(3.4, 3.3, iters=80)) is None
