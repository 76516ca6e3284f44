"""The kit's main claim, one axis at a time: every parallel layout trains exactly what one process
trains. Each layout starts from the same seed checkpoint and sees the same global batches (fp32 on
CPU), so its losses, and the first iteration's gradient norm, must equal the single process's to
floating-point reduction order: TP, TP+SP, PP, VPP, uneven PP, CP, DP, DP + distributed optimizer,
EP with both dispatchers, ETP, EDP and the 16-rank 5D layout (TP2 PP2 CP2 DP2, ETP1 EP4 EDP2).
Every run's live process groups (groups.json) must also be the ones Megatron's RankGenerator
predicts (Layout.rank_groups). One reference run per model, shared; the jobs run two at a time.
The lessons (notebooks 02-08) measure what each axis communicates and stores; this test owns the
equality."""
import math

import pytest

from helpers import launch
from helpers.job.layout import Layout
from helpers.launch import probe

# fp32 on CPU: layouts differ from one process only in the order of floating-point reductions (split
# matmuls, all-reduce sums). Measured differences are <= 2e-7 relative over 5 iterations at lr 3e-3;
# 1e-5 leaves room for Adam amplifying rounding noise, and is far below what a real bug moves (a
# missing gradient all-reduce, a wrong CP loss scale or a dropped expert shift losses by >= 1e-3).
RTOL = 1e-5
MODELS = {
    "tiny-gpt": dict(model="tiny-gpt", iters=5, micro_batch=2, global_batch=8),
    "tiny-moe": dict(model="tiny-moe", iters=5, micro_batch=2, global_batch=8),
    # the 16-rank layout's model: control-moe-cpu (top-8 of 16 experts), short sequences for 16 processes on 2 cores
    "control-moe-cpu": dict(model="control-moe-cpu", iters=3, micro_batch=1, global_batch=4, seq_len=32),
}
LAYOUTS = {  # name: (model, sizes)
    "tp2": ("tiny-gpt", dict(tp=2)),
    "tp2-sp": ("tiny-gpt", dict(tp=2, sp=True)),
    "pp2": ("tiny-gpt", dict(pp=2)),
    "pp2-vpp2": ("tiny-gpt", dict(pp=2, vpp=2)),
    "pp2-uneven-1-3": ("tiny-gpt", dict(pp=2, first_stage_layers=1, last_stage_layers=3)),
    "cp2": ("tiny-gpt", dict(cp=2)),
    "dp2": ("tiny-gpt", dict(nproc=2)),
    "dp2-distopt": ("tiny-gpt", dict(nproc=2, dist_opt=True)),
    "ep2-alltoall": ("tiny-moe", dict(ep=2, nproc=2, moe_dispatcher="alltoall")),
    "ep2-allgather": ("tiny-moe", dict(ep=2, nproc=2, moe_dispatcher="allgather")),
    "etp2": ("tiny-moe", dict(tp=2, sp=True, etp=2)),  # experts split like the dense layers: ETP = TP = 2
    "ep2-edp2": ("tiny-moe", dict(ep=2, nproc=4)),  # each expert on 2 of 4 ranks: expert gradients over EDP
    "5d-16-ranks": ("control-moe-cpu", dict(tp=2, pp=2, cp=2, ep=4, etp=1, sp=True, nproc=16)),
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, two_at_a_time):
    """{name: RunDir or the exception its job raised}: the references and every layout, each once."""
    jobs = {**{f"ref-{m}": (m, {}) for m in MODELS}, **LAYOUTS}
    outs = {name: str(tmp_path_factory.mktemp(name)) for name in jobs}

    def one(name):
        model, sizes = jobs[name]
        return launch.run(out=outs[name], device="cpu", progress=False, **MODELS[model], **sizes)

    return two_at_a_time(one, jobs)


def _ok(run):
    if isinstance(run, Exception):
        raise run
    return run


@pytest.mark.parametrize("name", LAYOUTS)
def test_layout_trains_what_one_process_trains(name, trained):
    model, sizes = LAYOUTS[name]
    run, ref = _ok(trained[name]), _ok(trained[f"ref-{model}"])
    iters = MODELS[model]["iters"]
    assert len(run.losses) == iters and all(math.isfinite(x) for x in run.losses)
    assert run.losses[-1] < run.losses[0]
    assert max(abs(a - b) / b for a, b in zip(run.losses, ref.losses)) <= RTOL, (run.losses, ref.losses)
    # Adam's update hides a constant gradient factor from the losses; the first gradient norm does not.
    a, b = run.metrics[0]["grad_norm"], ref.metrics[0]["grad_norm"]
    assert abs(a - b) / b <= RTOL, (a, b)
    assert not any(m["skipped"] for m in run.metrics)
    layout = Layout.of(run.spec)
    assert probe.mismatches(layout, run.groups) == []  # live groups = Megatron's RankGenerator's
    assert run.report["passed"], run.report
