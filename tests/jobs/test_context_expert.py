"""Context parallel and experts beyond what notebooks 07, 08 and 09 assert: CP
combined with MoE (where the loss scaling under CP shows, because the router's aux loss is scaled
separately), EP with ETP != TP, and the all-to-all volume formula. Without processes (the CP token
split the kit's attention assumes, the formula's scope): tests/unit/test_expert_cp_formulas.py."""
import math

import pytest

from helpers import launch
from helpers.views import comm, moe

JOB = dict(model="tiny-moe", iters=3, seq_len=32, micro_batch=1, global_batch=4)
RTOL = 1e-5  # fp32 on CPU; see test_launch.py


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return launch.run(out=str(tmp_path_factory.mktemp("ref")), device="cpu", progress=False, **JOB)


def _assert_matches(run, ref):
    assert len(run.losses) == JOB["iters"] and all(math.isfinite(x) for x in run.losses)
    assert max(abs(a - b) / b for a, b in zip(run.losses, ref.losses)) <= RTOL, (run.losses, ref.losses)
    # The first iteration's grad norm catches a constant gradient factor, which Adam's update would
    # hide from the losses (later norms drift by a few 1e-6: Adam amplifies rounding in near-zero grads).
    a, b = run.metrics[0]["grad_norm"], ref.metrics[0]["grad_norm"]
    assert abs(a - b) / b <= RTOL, (a, b)


# CP=2 with the experts on both ranks as well is the same CP loss scaling (and lesson 09 runs CP=2
# beside EP=4 on 16 ranks)
@pytest.mark.parametrize("layout", [dict(cp=2, ep=2)], ids=["cp2-ep2"])
def test_context_parallel_with_experts_matches_one_process(layout, reference, runs):
    run = launch.run(**runs, **JOB, **layout)
    _assert_matches(run, reference)
    assert moe.tokens_per_expert(run, 1) == moe.tokens_per_expert(reference, 1)


def test_expert_tp_differs_from_tp_and_alltoall_volume(reference, runs):
    """Dense TP=2 (+SP), experts ETP=1 x EP=2 on the same 2 ranks; the bytes entering every
    all_to_all_single on each rank equal (2H+1)(T*k + R) summed over layers and microbatches."""
    run = launch.run(**runs, **JOB, tp=2, sp=True, ep=2, etp=1)
    _assert_matches(run, reference)
    assert run.groups[0]["etp"] == [0] and run.groups[0]["ep"] == [0, 1] and run.groups[0]["tp"] == [0, 1]
    for it in range(1, JOB["iters"] + 1):
        for rank in (0, 1):
            measured = comm.bytes_by_op(run, rank, "ep", it)["all_to_all_single"]
            assert measured == moe.expected_alltoall_bytes(run, rank, it) > 0
    # T: each rank routes its SP slice: micro_batch * seq_len / tp tokens per microbatch, k copies each
    tokens = JOB["micro_batch"] * JOB["seq_len"] // 2
    sent = sum(sum(c) for c in moe.rank_tokens(run, 0, 1).values())
    assert sent == tokens * 2 * 4 * run.spec.num_microbatches  # T * k(2) * MoE layers(4) * microbatches
