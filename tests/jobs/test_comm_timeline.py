"""The worker's communication log (comm.jsonl) and timeline (timeline.jsonl), read back by the
notebook-side helpers, against formulas that follow from Megatron's algorithms."""

from helpers import launch
from helpers.views import comm

JOB = dict(model="tiny-gpt", iters=2, seq_len=32, micro_batch=2)


def test_dp2_ddp_all_reduces_the_whole_grad_buffer_once(runs):
    run = launch.run(**JOB, **runs, nproc=2, global_batch=4)
    for rank in (0, 1):
        dp = [r for r in comm.records(run) if r["rank"] == rank and r["axis"] == "dp"
              and r["iteration"] == 2]
        assert [(r["op"], r["bytes"], r["group"]) for r in dp] == [("all_reduce", run.ranks[rank]["grad_bytes"], [0, 1])]
        assert dp[0]["phase"] == "forward_backward"  # finalize_model_grads runs inside the schedule
    # the kit's own loss all-reduce is not logged as Megatron traffic
    assert not any(r["bytes"] == 8 and r["op"] == "all_reduce" for r in comm.records(run, include_trivial=True))
