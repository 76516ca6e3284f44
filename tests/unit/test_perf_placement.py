"""Where a layout's groups sit (helpers/perf/placement.py) comes from Megatron-Core's RankGenerator
through Layout.groups_of, and decides each group's link (helpers/perf/links.py): on whole nodes every
group of an axis sits alike; where a node's size is not a multiple of the ranks between a group's
members, the groups are where Megatron puts them. No processes, no torch.distributed."""
from collections import Counter

import pytest

from helpers.job.layout import Layout
from helpers.perf import links, placement
from helpers.perf.gpus import GpuProfile
from helpers.perf.links import Link
from helpers.perf.placement import Span

GPU = GpuProfile("test GPU", peak_bf16_tflops=1000.0, memory_gib=80.0, hbm_gb_per_s=1000.0, intra_node_gb_per_s=100.0,
                 inter_node_gb_per_s=10.0, source="made up")


def test_rank_zeros_groups_on_nodes_of_8():
    """64 ranks, TP2 CP2 PP2 (DP8), experts EP4: Megatron's order tp-cp-ep-dp-pp."""
    s = placement.spans(Layout(nproc=64, tp=2, cp=2, pp=2, ep=4, etp=1), 8)
    assert s["tp"] == s["cp"] == Span(2, 1, 2, 2)
    assert s["dp"] == Span(8, 4, 2, 2)  # ranks 0, 4, ..., 28: two on each of 4 nodes
    assert s["dp_cp"] == Span(16, 4, 4, 4)  # ranks 0, 2, ..., 30
    assert s["pp"] == Span(2, 2, 1, 1)  # ranks 0 and 32
    assert s["ep"] == Span(4, 1, 4, 4) and s["edp"] == Span(8, 4, 2, 2)


@pytest.mark.parametrize("sizes", [dict(nproc=64, tp=2, cp=2, pp=2, ep=4, etp=1), dict(nproc=32, tp=4, pp=4),
                                   dict(nproc=144, tp=8, pp=2, ep=8, etp=1), dict(nproc=16, cp=4, ep=2, etp=2)])
def test_on_whole_nodes_every_group_of_an_axis_sits_like_rank_zeros(sizes):
    lay = Layout(**sizes)
    per_node = 72 if lay.world_size == 144 else 8
    for axis, groups in lay.rank_groups().items():
        if axis in placement.AXES:
            shapes = {tuple(sorted(Counter(r // per_node for r in g).values())) for g in groups}
            assert len(shapes) == 1, (axis, shapes)


def test_a_node_size_the_strides_do_not_divide_places_groups_as_megatron_does():
    """6 GPUs per node, TP4 x DP6: rank 0's data-parallel group is ranks 0, 4, 8, 12, 16, 20, on
    nodes 0, 0, 1, 2, 2, 3: four nodes, one or two ranks on each (not one rank on each of six)."""
    lay = Layout(nproc=24, tp=4)
    assert lay.groups_of(0)["dp"] == [0, 4, 8, 12, 16, 20]
    assert placement.spans(lay, 6)["dp"] == Span(6, 4, 1, 2)
    # a ring through the least-filled node's one port; the all-to-all keeps 2 of 6 shares on rank 0's node
    assert links.of(lay, "dp", 6, GPU) == Link(10.0, True, 4, 10.0, 2)
    assert links.of(lay, "tp", 6, GPU) == Link(100.0)  # ranks 0-3 on node 0


def test_on_one_node_every_group_is_whole_as_megatron_places_it():
    lay = Layout(nproc=8, tp=2, pp=2, ep=2, etp=1)
    groups = lay.groups_of(0)
    assert placement.spans(lay, 8) == {axis: Span(len(groups[axis]), 1, len(groups[axis]), len(groups[axis]))
                                       for axis in placement.AXES}


def test_the_pipelines_sends_cross_nodes_only_when_its_stages_do():
    assert links.point_to_point(Layout(nproc=16, tp=4, pp=2), 8, GPU) == Link(10.0, True)
    assert links.point_to_point(Layout(nproc=8, tp=4, pp=2), 8, GPU) == Link(100.0)


def test_spans_are_cached_per_group_shape():
    """The advisor asks for thousands of layouts that share far fewer group shapes."""
    a = placement.spans(Layout(nproc=32, tp=4, pp=2, micro_batch=1), 8)
    b = placement.spans(Layout(nproc=32, tp=4, pp=2, micro_batch=4, sp=True, seq_len=4096), 8)
    assert a is b
    assert placement.spans(Layout(nproc=32, tp=4, pp=2), 16) is not a


def test_placement_leaves_torch_distributed_uninitialised():
    import torch.distributed as dist

    placement.spans(Layout(nproc=16, tp=2, pp=2), 8)
    assert not dist.is_initialized()
