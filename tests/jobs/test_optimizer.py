"""The optimizer and data-parallel overlap settings in real CPU jobs (tiny-gpt): weight decay reaches
the update (same first loss, a different second one), overlapping the gradient reduce-scatter and
the parameter all-gather trains as the same job without overlap, and megatron.json and Megatron-LM's
flags carry the values."""
import json

import pytest

from helpers import launch
from helpers.rundir import megatron_flags

# fp32 on CPU. Overlap changes only where the buffer is cut into buckets, and so where the distributed
# optimizer pads and shards it: the gradient norm sums its squares in another order. Measured:
# <= 3.2e-8 relative over 4 iterations (also at PP=2+VPP, TP=2+SP, CP=2, MoE EP=2); 1e-6 leaves room
# for Adam amplifying that rounding, far below what a missed or doubled reduction does (>= 1e-3).
RTOL = 1e-6
OVERLAP = dict(overlap_grad_reduce="on", overlap_param_gather="on", ddp_bucket_size=5_000)  # ~30 buckets
# Non-default Adam settings in both overlap jobs: they must reach the record and the flags too.
ADAM = dict(adam_beta1=0.85, adam_beta2=0.99, adam_eps=1e-6)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory, two_at_a_time):
    out = str(tmp_path_factory.mktemp("optimizer"))
    base = dict(out=out, device="cpu", progress=False)
    specs = {
        "wd0.1": dict(iters=3, weight_decay=0.1),
        "wd0": dict(iters=3, weight_decay=0.0),
        "overlap": dict(iters=4, nproc=2, dist_opt=True, micro_batch=1, global_batch=8, save_interval=2,
                        **ADAM, **OVERLAP),
        "no-overlap": dict(iters=4, nproc=2, dist_opt=True, micro_batch=1, global_batch=8, save_interval=2, **ADAM),
    }
    return two_at_a_time(lambda name: launch.run(**base, name=name, **specs[name]), specs)


def _run(jobs, name):
    if isinstance(jobs[name], Exception):
        raise jobs[name]
    return jobs[name]


def test_weight_decay_changes_the_update_not_the_start(jobs):
    decayed, plain = _run(jobs, "wd0.1"), _run(jobs, "wd0")
    assert decayed.losses[0] == plain.losses[0]  # same weights, same batch: decay acts only in the step
    assert abs(decayed.losses[1] - plain.losses[1]) > 1e-6  # decayed weight matrices, another second loss
    for run, wd in ((decayed, 0.1), (plain, 0.0)):
        assert run.megatron["OptimizerConfig"]["weight_decay"] == wd  # Megatron's default is 0.01: recorded
        assert f"--weight-decay {wd}" in megatron_flags.flags(run.megatron)
        assert run.manifest["spec"]["weight_decay"] == wd


def test_overlap_trains_as_without_it(jobs):
    on, off = _run(jobs, "overlap"), _run(jobs, "no-overlap")
    assert on.losses[0] == off.losses[0]
    assert max(abs(a - b) / abs(b) for a, b in zip(on.losses, off.losses)) <= RTOL, (on.losses, off.losses)
    checks = {c["name"]: c["status"] for c in on.report["checks"]}
    # every replica's weights equal after the first and the last step, and a saved checkpoint
    # reloads bit-identically: the updated weights were gathered before anything read them
    assert checks["backward"] == "pass" and checks["checkpoint"] == "pass", checks
    # Iteration 4's forward follows a step nothing read the weights after (the card compares replicas
    # after step 1, a save follows step 2): its forward pre-hooks all-gather them, bucket by bucket,
    # and its backward reduce-scatters the gradients, each bucket an asynchronous collective.
    rows = [json.loads(line) for line in (on.path / "comm.jsonl").read_text().splitlines()]
    dp = [r for r in rows if r["iteration"] == 4 and r["phase"] == "forward_backward"
          and r["op"] in ("reduce_scatter_tensor", "all_gather_into_tensor")]
    assert all(r["async"] and r["axis"] == "dp" for r in dp), dp
    assert {r["op"] for r in dp} == {"reduce_scatter_tensor", "all_gather_into_tensor"} and len(dp) > 2


def test_megatron_record_and_flags_carry_the_overlap_and_adam_settings(jobs):
    on, off = _run(jobs, "overlap"), _run(jobs, "no-overlap")
    ddp = on.megatron["DistributedDataParallelConfig"]
    assert (ddp["overlap_grad_reduce"], ddp["overlap_param_gather"], ddp["bucket_size"]) == (True, True, 5_000)
    assert "overlap_grad_reduce" not in off.megatron["DistributedDataParallelConfig"]
    assert {k: on.megatron["OptimizerConfig"][k] for k in ADAM} == ADAM
    flags = megatron_flags.flags(on.megatron)
    for flag in ("--overlap-grad-reduce", "--overlap-param-gather", "--ddp-bucket-size 5000", "--adam-beta1 0.85",
                 "--adam-beta2 0.99", "--adam-eps 1e-06", "--use-distributed-optimizer"):
        assert flag in flags, (flag, flags)
    assert "--overlap-grad-reduce" not in megatron_flags.flags(off.megatron)
    assert {k: on.manifest["spec"][k] for k in OVERLAP} == OVERLAP
    assert off.manifest["spec"]["overlap_grad_reduce"] == "off"  # auto, decided before start: off on CPU
