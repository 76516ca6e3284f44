"""The groups-only job: torchrun starts a layout's ranks, the kit's worker stops right after
`initialize_model_parallel` (no model, no data, no training; JobSpec.groups_only), and the live
groups (groups.json) are Layout.rank_groups()'s (helpers/launch/probe.py). One layout of 4 real
processes in which both grids fold over each other: dense TP=2 x DP=2, experts ETP=1 x EP=2 x EDP=2.

The same claim for every other layout: tests/unit/test_megatron_groups.py calls Megatron's
initialize_model_parallel rank by rank on torch's fake process-group backend (no processes), and
every layout a lesson (03-09, the 16-rank 5D layout included) or tests/jobs/test_layouts.py trains
checks its live groups against the prediction."""
from helpers import launch
from helpers.job.layout import Layout
from helpers.launch import probe


def test_predicted_groups_equal_live_groups(tmp_path):
    layout = Layout(tp=2, sp=True, ep=2, etp=1, nproc=4)
    spec = layout.job_spec("tiny-moe", iters=0, device="cpu", groups_only=True, seed_checkpoint=False,
                           out=str(tmp_path))
    run = launch.run(spec, progress=False)
    assert sorted(run.groups) == list(range(layout.world_size))
    assert probe.mismatches(layout, run.groups) == []
    assert not run.metrics  # no model was built, nothing trained
