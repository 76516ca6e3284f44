"""Rank grids: Layout.rank_groups() (Megatron's RankGenerator, no processes) equals the groups
live jobs get from parallel_state.initialize_model_parallel (groups.json), layout by layout.

Cost on a 2-core CPU is the ~5 s import per process, so layouts use as few processes as show
the axis; the 16-process layout runs once. Jobs that can train go through launch.run (iters=1);
layouts with CP > 1, which the local backend cannot build a model for yet, go through
helpers.probe (the same worker, stopped right after the groups exist). 13 layouts in all."""
import pytest

from helpers import launch, probe
from helpers.layout import Layout

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
    # The 16-process layout: dense TP2 PP2 CP2 DP2, experts ETP1 EP4 EDP2.
    ("control-moe-cpu", Layout(tp=2, pp=2, cp=2, ep=4, etp=1, sp=True, world_size=16, gpus_per_node=8)),
]


def _name(model, sizes):
    return model + "-" + ("-".join(f"{k}{v}" for k, v in sizes.items()) or "single")


@pytest.mark.parametrize("model, sizes", TRAINED, ids=[_name(m, s) for m, s in TRAINED])
def test_predicted_groups_equal_live_groups(model, sizes, tmp_path):
    run = launch.run(model=model, out=str(tmp_path), **JOB, **sizes)
    layout = launch.layout_of(run.spec)
    assert len(run.losses) == 1
    assert probe.mismatches(layout, run.groups) == []


@pytest.mark.parametrize("model, layout", GROUPS_ONLY, ids=[f"{m}-{l.describe()}" for m, l in GROUPS_ONLY])
def test_predicted_groups_equal_live_groups_for_cp(model, layout, tmp_path):
    run = probe.live_groups(layout, model=model, out=str(tmp_path))
    assert probe.mismatches(layout, run.groups) == []
    assert not run.metrics  # no model was built, nothing trained


def test_sixteen_rank_layout_groups_by_hand():
    """The numbers a reader can check: TP pairs are neighbours, PP pairs are 8 apart (one per
    node), and an EP group of 4 spans the two DP replicas of one CP pair."""
    g = Layout(tp=2, pp=2, cp=2, ep=4, etp=1, world_size=16, gpus_per_node=8).rank_groups()
    assert g["tp"][:2] == [[0, 1], [2, 3]]
    assert g["cp"][:2] == [[0, 2], [1, 3]]
    assert g["dp"][:2] == [[0, 4], [1, 5]]
    assert g["pp"][0] == [0, 8]
    assert g["mp"][0] == [0, 1, 8, 9]  # TP x PP: model parallel excludes CP
    assert g["ep"][0] == [0, 1, 2, 3] and g["edp"][0] == [0, 4] and g["etp"][0] == [0]


@pytest.mark.parametrize("layout", [
    Layout(tp=2, pp=2, cp=2, ep=4, etp=1, world_size=16),
    Layout(tp=4, pp=2, ep=8, etp=1, world_size=64),
    Layout(tp=2, cp=4, ep=2, etp=2, world_size=32),
], ids=lambda l: l.describe())
def test_every_axis_partitions_the_world(layout):
    sizes = dict(tp=layout.tp, cp=layout.cp, dp=layout.dp, dp_cp=layout.dp * layout.cp, pp=layout.pp,
                 mp=layout.tp * layout.pp, etp=layout.expert_tp, ep=layout.ep, edp=layout.edp)
    for axis, groups in layout.rank_groups().items():
        if axis == "embedding":
            continue
        assert sorted(r for g in groups for r in g) == list(range(layout.world)), axis
        assert {len(g) for g in groups} == {sizes[axis]}, axis


def test_placement_numbers_ranks_node_by_node():
    place = Layout.on(2, 4, tp=2).placement()
    assert place[0] == (0, 0) and place[3] == (0, 3) and place[4] == (1, 0) and place[7] == (1, 3)
