"""The advisor's fastest fitting layout without planning every layout (helpers/advisor/advise.py
fastest): the same row as advise(...).best() for dense and MoE models, with a memory so tight that
the fastest layouts need recompute or do not fit, and on a narrowed space; the training choices can
be narrowed to the distributed optimizer on. No processes."""
import dataclasses

import pytest

from helpers.advisor import advise, fastest
from helpers.advisor.candidates import candidates
from helpers.advisor.gpus import resolve
from helpers.job.models import preset
from helpers.perf.layouts import Space

H100 = resolve("h100-80gb")


@pytest.mark.parametrize("name, gpus, gpu, seq, gbs", [
    ("tiny-moe", 16, dataclasses.replace(H100, memory_gib=0.09), 256, 32),
    ("llama3-8b", 16, H100, 4096, 64),
    # 20 GiB: the fastest layouts of an 8B model do not fit; the fastest that does recomputes
    ("llama3-8b", 8, dataclasses.replace(H100, memory_gib=20.0), 4096, 32),
])
def test_the_fastest_is_the_advices_best(name, gpus, gpu, seq, gbs):
    model = preset(name)
    advice = advise(model, gpus, gpu, seq_len=seq, global_batch=gbs, max_micro_batch=4)
    best = advice.best()
    assert best is not None and any(not r.fits for r in advice.rows if r.step.step_s < best.step.step_s)
    found = fastest(model, gpus, gpu, seq_len=seq, global_batch=gbs, max_micro_batch=4)
    assert found.to_dict() == best.to_dict()


def test_the_tight_case_needs_recompute_and_fastest_finds_it():
    gpu = dataclasses.replace(H100, memory_gib=20.0)
    found = fastest(preset("llama3-8b"), 8, gpu, seq_len=4096, global_batch=32, max_micro_batch=4)
    assert found.fits and found.training.recompute == "full" and found.memory_gib <= 20.0


def test_nothing_fits_gives_none():
    gpu = dataclasses.replace(H100, memory_gib=1.0)
    assert fastest(preset("llama3-8b"), 8, gpu, seq_len=4096, global_batch=16, max_micro_batch=2) is None


def test_a_narrowed_space_and_training_choices():
    model, space = preset("tiny-moe"), Space(sp_off=False, expert_tp=False, vpp=False)
    kept = list(candidates(model, 16, 8, 256, 32, max_micro_batch=2, space=space, dist_opt=(True,)))
    accepted = [c for c in kept if not c.refused]
    assert accepted and all(c.layout.vpp is None and c.layout.sp == (c.layout.tp > 1) for c in kept)
    assert all(c.layout.expert_tp == 1 for c in kept)
    # on where there is something to shard, off alone where there is not
    assert {c.training.dist_opt for c in accepted if c.layout.dp * c.layout.cp > 1 or c.layout.edp > 1} == {True}
    assert {c.training.dist_opt for c in accepted if c.layout.dp * c.layout.cp == 1 and c.layout.edp == 1} == {False}
    full = advise(model, 16, H100, seq_len=256, global_batch=32, max_micro_batch=2, space=space)
    assert fastest(model, 16, H100, seq_len=256, global_batch=32, max_micro_batch=2,
                   space=space).to_dict() == full.best().to_dict()
