"""Rank grids: Layout.rank_groups() (Megatron's RankGenerator, no processes) equals the groups
live jobs get from parallel_state.initialize_model_parallel (groups.json), for the combinations
tests/jobs/test_layouts.py does not train (it checks the groups of every layout it trains: each
axis alone and the 16-rank 5D layout).

Only the groups are needed, so every layout goes through helpers.launch.probe: the kit's worker,
stopped right after `initialize_model_parallel` (no model, no data, no training; JobSpec.groups_only).
Cost on a 2-core CPU is the process start, so layouts use as few processes as show the axes. The
layouts are probed two at a time (one module fixture): a probe is mostly process start, one core's
work for much of it, and two side by side fill both cores."""
import pytest

from helpers.job.layout import Layout
from helpers.job.spec import JobSpec
from helpers.launch import probe

LAYOUTS = [  # (model, JobSpec sizes)
    ("tiny-gpt", dict(tp=2, cp=2)),
    ("tiny-gpt", dict(tp=2, pp=2, nproc=8)),
    ("tiny-moe", dict(tp=2, sp=True, ep=2, etp=1, nproc=4)),
    ("tiny-moe", dict(tp=2, sp=True, ep=2, etp=2, nproc=4)),
    ("control-moe-cpu", dict(pp=2, ep=2, nproc=4)),
    ("control-moe-cpu", dict(tp=2, sp=True, pp=2, ep=2, etp=1, nproc=8)),
]


def _name(model, sizes):
    return model + "-" + ("-".join(f"{k}{v}" for k, v in sizes.items()) or "single")


def _layout(model, sizes):
    return Layout.of(JobSpec(model=model, micro_batch=1, **sizes))


@pytest.fixture(scope="module")
def live(tmp_path_factory, two_at_a_time):
    """{layout name: the probe's RunDir, or the exception it raised}, every layout probed once."""
    layouts = {_name(m, s): (m, s) for m, s in LAYOUTS}
    outs = {name: str(tmp_path_factory.mktemp(name)) for name in layouts}

    def one(name):
        model, sizes = layouts[name]
        return probe.live_groups(_layout(model, sizes), model=model, out=outs[name])

    return two_at_a_time(one, layouts)


@pytest.mark.parametrize("model, sizes", LAYOUTS, ids=[_name(m, s) for m, s in LAYOUTS])
def test_predicted_groups_equal_live_groups(model, sizes, live):
    layout = _layout(model, sizes)
    run = live[_name(model, sizes)]
    if isinstance(run, Exception):
        raise run
    assert sorted(run.groups) == list(range(layout.world_size))
    assert probe.mismatches(layout, run.groups) == []
    assert not run.metrics  # no model was built, nothing trained
