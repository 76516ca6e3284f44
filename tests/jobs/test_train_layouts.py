"""Each layout the Foundation issue names trains 5 iterations through Megatron-Core's own
TP/PP/DDP/optimizer/schedules with finite, falling loss, and matches one process (fp32)."""
import math

import pytest

from helpers import launch

BATCH = dict(iters=5, micro_batch=2, global_batch=8)
RTOL = 1e-5  # see test_launch.py for why

LAYOUTS = {
    "pp2-vpp2": dict(pp=2, vpp=2),
    "dp2-distopt": dict(nproc=2, dist_opt=True),
    "moe-ep2-alltoall": dict(model="tiny-moe", ep=2, nproc=2, moe_dispatcher="alltoall"),
    "tp2-pp2-dp2": dict(tp=2, pp=2, nproc=8),
}


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("refs"))
    return {m: launch.run(out=out, device="cpu", progress=False, model=m, **BATCH).losses
            for m in ["tiny-gpt", "tiny-moe"]}


@pytest.mark.parametrize("name", LAYOUTS)
def test_layout_trains_and_matches_one_process(name, references, runs):
    layout = LAYOUTS[name]
    run = launch.run(**runs, **BATCH, **layout)
    losses = run.losses
    assert len(losses) == 5 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]
    ref = references[layout.get("model", "tiny-gpt")]
    assert max(abs(a - b) / b for a, b in zip(losses, ref)) <= RTOL, (losses, ref)
    assert not any(m["skipped"] for m in run.metrics)
