"""Rank grids: Layout.rank_groups() (Megatron's RankGenerator, no processes) equals the groups
live jobs get from parallel_state.initialize_model_parallel (groups.json), layout by layout.

Cost on a 2-core CPU is the ~5 s import per process, so layouts use as few processes as show
the axis; the 16-process layout runs once. Jobs that can train go through launch.run (iters=1);
layouts with CP > 1, which the local backend cannot build a model for yet, go through
helpers.launch.probe (the same worker, stopped right after the groups exist). 13 layouts in all."""
import pytest

from helpers import launch
from helpers.job.layout import Layout
from helpers.launch import probe

JOB = dict(iters=1, device="cpu", progress=False, seed_checkpoint=False, micro_batch=1)

TRAINED = [  # (model, JobSpec sizes)
    ("tiny-gpt", dict()),
    ("tiny-gpt", dict(tp=2)),
    ("tiny-gpt", dict(pp=2)),
    ("tiny-gpt", dict(nproc=2)),
    ("tiny-gpt", dict(pp=2, vpp=2, global_batch=2)),
    ("tiny-moe", dict(ep=2, nproc=2)),
    ("tiny-moe", dict(tp=2, sp=True, ep=2, etp=1, nproc=4)),
    ("tiny-moe", dict(tp=2, sp=True, ep=2, etp=2, nproc=4)),
    ("control-moe-cpu", dict(pp=2, ep=2, nproc=4)),
    ("control-moe-cpu", dict(tp=2, sp=True, pp=2, ep=2, etp=1, nproc=8)),
]
GROUPS_ONLY = [  # CP > 1: groups only
    ("tiny-gpt", Layout(cp=2)),
    ("tiny-gpt", Layout(tp=2, cp=2)),
    # The 16-process layout (dense TP2 PP2 CP2 DP2, experts ETP1 EP4 EDP2) is checked rank by rank
    # against the prediction in notebooks/07_five_d_layout.ipynb, which trains it.
]


def _name(model, sizes):
    return model + "-" + ("-".join(f"{k}{v}" for k, v in sizes.items()) or "single")


@pytest.mark.parametrize("model, sizes", TRAINED, ids=[_name(m, s) for m, s in TRAINED])
def test_predicted_groups_equal_live_groups(model, sizes, tmp_path):
    run = launch.run(model=model, out=str(tmp_path), **JOB, **sizes)
    layout = Layout.of(run.spec)
    assert len(run.losses) == 1
    assert probe.mismatches(layout, run.groups) == []


@pytest.mark.parametrize("model, layout", GROUPS_ONLY, ids=[f"{m}-{l.describe()}" for m, l in GROUPS_ONLY])
def test_predicted_groups_equal_live_groups_for_cp(model, layout, tmp_path):
    run = probe.live_groups(layout, model=model, out=str(tmp_path))
    assert probe.mismatches(layout, run.groups) == []
    assert not run.metrics  # no model was built, nothing trained
