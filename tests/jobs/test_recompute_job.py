"""Full activation recompute in a real CPU job: tiny-gpt with recompute_granularity="full" (uniform, one
layer per recomputed unit) trains what the same job without recompute trains, saves for the backward
what its memory plan says.
Rules, flags (through Megatron-LM's own parse_args + validate_args), recipe and planner without
processes: tests/unit/test_recompute.py."""
import math

import pytest

from helpers import launch

JOB = dict(model="tiny-gpt", device="cpu", progress=False, iters=3, seq_len=32, micro_batch=2, global_batch=4)
FULL = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
# Recompute runs each layer's forward again on the same input in the same order: the same fp32
# arithmetic, so the losses come out equal (measured: identical to the last bit, on 1 to 4 ranks).
# 1e-6 relative (a few fp32 ulps of a loss near 6) only allows for a matmul library that rounds a
# freshly allocated buffer differently; it is ten times tighter than the kit's bound between layouts
# (1e-5, where the reduction order changes), and a recompute that went wrong (a layer run on stale
# inputs, a gradient lost in the replay) moves the loss by 1e-3 or more.
RTOL = 1e-6


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("recompute"))
    return launch.run(**JOB, out=out), launch.run(**JOB, **FULL, out=out)  # one job at a time


def test_full_recompute_trains_what_the_job_without_it_trains(runs):
    plain, recomputed = runs
    assert len(recomputed.losses) == JOB["iters"] and all(math.isfinite(x) for x in recomputed.losses)
    assert max(abs(a - b) / b for a, b in zip(recomputed.losses, plain.losses)) <= RTOL, \
        (recomputed.losses, plain.losses)
    a, b = recomputed.metrics[0]["grad_norm"], plain.metrics[0]["grad_norm"]
    assert abs(a - b) / b <= RTOL, (a, b)
    assert recomputed.report["passed"], recomputed.report
    fields = recomputed.megatron["TransformerConfig"]["fields"]  # what the workers built
    assert {k: fields.get(k) for k in FULL} == FULL
    assert "recompute_granularity" not in plain.megatron["TransformerConfig"]["fields"]


def test_it_saves_what_the_memory_plan_of_its_fields_says(runs):
    """What one microbatch's forward saves for the backward (saved-tensor hooks, ranks.json): full
    recompute keeps little more than each layer's input, and the planner, reading the job's recompute
    fields (Training.of), says so within 5% (measured: -0.8% with recompute, +2.4% without)."""
    from helpers.job.layout import Layout
    from helpers.memory import Training, plan_memory

    saved = {}
    for run in runs:
        measured = run.ranks[0]["saved_activation_bytes_per_microbatch"]
        terms = plan_memory(run.spec.model_preset(), Layout.of(run.spec), Training.of(run.spec)).stages[0].terms
        planned = terms["activations"] + terms["logits_loss"]  # one microbatch in flight, one stage
        assert abs(planned / measured - 1) <= 0.05, (run.spec.recompute_granularity, planned, measured)
        saved[run.spec.recompute_granularity] = measured
    assert saved["full"] < saved[None] / 4, saved
