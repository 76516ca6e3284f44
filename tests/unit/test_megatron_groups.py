"""The kit's prediction of every process group (Layout.rank_groups: Megatron's RankGenerator, no
processes) equals what Megatron-Core's `parallel_state.initialize_model_parallel` builds, on every
rank of each layout, without starting a process: this process plays each rank in turn in a world of
torch's fake process-group backend (no communication; `dist.new_group` and
`get_process_group_ranks` behave as in a real world), called with the worker's own arguments
(helpers/runtime/setup.parallel_args) and read with the worker's own reader of groups.json
(helpers/runtime/measure/gather.describe_process_groups).

Real worlds of processes, rank by rank against the same prediction: the lessons 03-09 (every layout
they train, the 16-rank 5D layout of lesson 09 included), tests/jobs/test_layouts.py, and
tests/jobs/test_rank_groups.py (the groups-only probe)."""
import pytest
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from helpers.job.layout import Layout
from helpers.launch import probe

LAYOUTS = [
    # each axis alone
    Layout(tp=2), Layout(cp=2), Layout(pp=2), Layout(pp=2, vpp=2), Layout(nproc=2), Layout(ep=2, nproc=2),
    Layout(tp=2, sp=True, etp=2), Layout(ep=2, nproc=4),
    # combinations: dense axes, the expert grid folded over them, several nodes' worth of ranks
    Layout(tp=2, cp=2), Layout(tp=2, pp=2, nproc=8), Layout(pp=2, ep=2, nproc=4),
    Layout(tp=2, sp=True, ep=2, etp=1, nproc=4), Layout(tp=2, sp=True, ep=2, etp=2, nproc=4),
    Layout(tp=2, sp=True, pp=2, ep=2, etp=1, nproc=8), Layout(tp=2, sp=True, pp=2, vpp=2, ep=2, etp=1, nproc=4),
    Layout(tp=2, pp=2, cp=2, ep=4, etp=1, sp=True, nproc=16), Layout(tp=4, pp=2, ep=4, etp=1, sp=True, nproc=16),
    Layout(tp=2, cp=4, ep=2, etp=2, nproc=32), Layout(tp=4, pp=2, ep=8, etp=1, nproc=64),
]


def megatron_groups(layout: Layout) -> dict[int, dict[str, list[int]]]:
    """{rank: {axis: ranks}} as the layout's workers would write groups.json: for each rank in turn,
    a fake world of the layout's size, Megatron's initialize_model_parallel, the groups read back."""
    from megatron.core import parallel_state as ps

    from helpers.runtime import setup
    from helpers.runtime.measure.gather import describe_process_groups

    assert not dist.is_initialized(), "a process group is already up in this process"
    spec = layout.job_spec("tiny-gpt")
    groups = {}
    for rank in range(layout.world_size):
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=layout.world_size)
        try:
            # No gloo twins of the data-parallel groups: a fake world has no transport to build them
            # on, and groups.json does not read them.
            ps.initialize_model_parallel(**setup.parallel_args(spec, timeout_s=60), create_gloo_process_groups=False)
            groups[rank] = describe_process_groups()
        finally:
            ps.destroy_model_parallel()
            dist.destroy_process_group()
    return groups


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.job_spec("tiny-gpt").layout_name()
                         + (f"-etp{layout.etp}" if layout.etp else ""))
def test_predicted_groups_are_the_groups_megatron_builds_on_every_rank(layout):
    groups = megatron_groups(layout)
    assert sorted(groups) == list(range(layout.world_size))
    assert probe.mismatches(layout, groups) == []


def test_the_comparison_tells_layouts_of_the_same_world_apart():
    """Not vacuous: TP=2 x CP=2's groups are not what CP=2 x DP=2 on the same 4 ranks predicts."""
    groups = megatron_groups(Layout(tp=2, cp=2))
    assert any(line.startswith("rank 0 tp:") for line in probe.mismatches(Layout(cp=2, nproc=4), groups))
