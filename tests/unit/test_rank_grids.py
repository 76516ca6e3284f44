"""Rank grids without processes: Layout.rank_groups() (Megatron's own RankGenerator) gives the
numbers a reader can check by hand, every axis partitions the world, torchrun numbers ranks node
by node. The same grids against live jobs: tests/jobs/test_rank_groups.py."""
import pytest

from helpers.job.layout import Layout


def test_sixteen_rank_layout_groups_by_hand():
    """The numbers a reader can check: TP pairs are neighbours, PP pairs are 8 apart (one per
    node), and an EP group of 4 spans the two DP replicas of one CP pair."""
    g = Layout(tp=2, pp=2, cp=2, ep=4, etp=1, nproc=16, gpus_per_node=8).rank_groups()
    assert g["tp"][:2] == [[0, 1], [2, 3]]
    assert g["cp"][:2] == [[0, 2], [1, 3]]
    assert g["dp"][:2] == [[0, 4], [1, 5]]
    assert g["pp"][0] == [0, 8]
    assert g["mp"][0] == [0, 1, 8, 9]  # TP x PP: model parallel excludes CP
    assert g["ep"][0] == [0, 1, 2, 3] and g["edp"][0] == [0, 4] and g["etp"][0] == [0]


@pytest.mark.parametrize("layout", [
    Layout(tp=2, pp=2, cp=2, ep=4, etp=1, nproc=16),
    Layout(tp=4, pp=2, ep=8, etp=1, nproc=64),
    Layout(tp=2, cp=4, ep=2, etp=2, nproc=32),
], ids=lambda l: l.describe())
def test_every_axis_partitions_the_world(layout):
    sizes = dict(tp=layout.tp, cp=layout.cp, dp=layout.dp, dp_cp=layout.dp * layout.cp, pp=layout.pp,
                 mp=layout.tp * layout.pp, etp=layout.expert_tp, ep=layout.ep, edp=layout.edp)
    for axis, groups in layout.rank_groups().items():
        if axis == "embedding":
            continue
        assert sorted(r for g in groups for r in g) == list(range(layout.world_size)), axis
        assert {len(g) for g in groups} == {sizes[axis]}, axis


def test_placement_numbers_ranks_node_by_node():
    place = Layout.on(2, 4, tp=2).placement()
    assert place[0] == (0, 0) and place[3] == (0, 3) and place[4] == (1, 0) and place[7] == (1, 3)
