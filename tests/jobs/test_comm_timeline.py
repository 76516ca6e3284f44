"""The worker's communication log (comm.jsonl) and timeline (timeline.jsonl), read back by the
notebook-side helpers, against formulas that follow from Megatron's algorithms."""

from helpers import launch
from helpers.views import comm, schedule

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


def test_tp2_all_reduces_per_layer_match_formula_and_shapes_are_split(runs):
    run = launch.run(**JOB, **runs, tp=2)
    act = 32 * 2 * 64 * 4  # seq x micro_batch x hidden x fp32
    assert comm.activation_bytes(run) == act
    for rank in (0, 1):
        counts = comm.counts(run, rank, "tp", nbytes=act)
        assert counts == {"all_reduce": 4 * 4 + 2}  # 4 layers x (2 fwd + 2 bwd) + embedding + output layer
        assert counts == comm.expected_tp(run)
    shapes = run.ranks[1]["param_shapes"]
    assert shapes["decoder.layers.0.self_attention.linear_qkv.weight"] == {
        "shape": [3 * 64 // 2, 64], "tp_split_dim": 0, "sequence_parallel": False}
    assert shapes["decoder.layers.0.mlp.linear_fc2.weight"]["shape"] == [64, 256 // 2]
    assert run.ranks[0]["saved_activation_bytes_per_microbatch"] > 0


def test_pp2_timeline_is_1f1b_and_p2p_counts_match(runs):
    run = launch.run(**JOB, **runs, pp=2, global_batch=8)  # 4 microbatches
    m = run.spec.num_microbatches
    for rank, stage in ((0, 0), (1, 1)):
        order = schedule.order(run, rank, iteration=2).split()
        assert sorted(order) == sorted([f"F{i}" for i in range(m)] + [f"B{i}" for i in range(m)])
        assert order.index("B0") == 2 - stage  # warm-up forwards: p - s
        assert comm.counts(run, rank, "pp") == comm.expected_pp(run, rank) == {"isend": m, "irecv": m}
    bubble = schedule.bubble(run)
    assert set(bubble) == {0, 1} and all(0 < b < 1 for b in bubble.values())
    events = schedule.events(run)
    assert {e["kind"] for e in events} >= {"F", "B", "wait", "forward_backward", "optimizer"}
    assert all(e["t1"] >= e["t0"] for e in events)
