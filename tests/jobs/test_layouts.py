"""The kit's main claim, one axis at a time: every parallel layout trains exactly what one process
trains. Each layout starts from the same seed checkpoint and sees the same global batches (fp32 on
CPU), so its losses, and the first iteration's gradient norm, must equal the single process's to
floating-point reduction order: TP, TP+SP, PP, VPP, uneven PP, CP, DP, DP + distributed optimizer,
EP with both dispatchers, ETP, EDP and the 16-rank 5D layout (TP2 PP2 CP2 DP2, ETP1 EP4 EDP2).
Every run's live process groups (groups.json) must also be the ones Megatron's RankGenerator
predicts (Layout.rank_groups). One reference run per model, shared; the jobs run two at a time.
The lessons (notebooks 03-09) measure what each axis communicates and stores; this test owns the
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


@pytest.mark.parametrize("name, config, flags", [
    ("tp2-sp", dict(tensor_model_parallel_size=2, sequence_parallel=True),
     ["--tensor-model-parallel-size 2", "--sequence-parallel"]),
    ("pp2-vpp2", dict(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2),
     ["--pipeline-model-parallel-size 2", "--num-virtual-stages-per-pipeline-rank 2"]),
    ("ep2-alltoall", dict(expert_model_parallel_size=2, moe_token_dispatcher_type="alltoall"),
     ["--expert-model-parallel-size 2", "--moe-token-dispatcher-type alltoall"]),
])
def test_the_run_records_what_it_asked_of_megatron(name, config, flags, trained):
    """megatron.json holds the TransformerConfig the workers built, and Megatron-LM's own parser
    reads the flags made from it back to the same values."""
    from helpers.rundir import megatron_flags
    calls = _ok(trained[name]).megatron
    fields = calls["TransformerConfig"]["fields"]
    assert {k: fields.get(k) for k in config} == config
    assert {k: calls["initialize_model_parallel"][k] for k in config if k in calls["initialize_model_parallel"]} \
        == {k: v for k, v in config.items() if k in calls["initialize_model_parallel"]}
    made = megatron_flags.flags(calls)
    assert set(flags) <= set(made), made
    args = megatron_flags.parse(made)
    assert args.tensor_model_parallel_size == fields.get("tensor_model_parallel_size", 1)
    assert args.sequence_parallel == fields.get("sequence_parallel", False)
    assert args.pipeline_model_parallel_size == fields.get("pipeline_model_parallel_size", 1)
    assert (args.num_virtual_stages_per_pipeline_rank or None) == fields.get("virtual_pipeline_model_parallel_size")
    assert args.num_layers == fields["num_layers"] and args.hidden_size == fields["hidden_size"]
    ranks = calls["modules"]
    assert len(ranks) == _ok(trained[name]).spec.world_size
    # every rank's modules are Megatron's classes with this rank's local shapes
    qkv = [r for r in ranks["0"] if r["name"].endswith("layers.0.self_attention.linear_qkv")]
    assert qkv and qkv[0]["class"] == "ColumnParallelLinear" and qkv[0]["module"].startswith("megatron.core")
    tp = fields.get("tensor_model_parallel_size", 1)
    heads, groups, dim = fields["num_attention_heads"], fields["num_query_groups"], fields["kv_channels"]
    assert qkv[0]["params"]["weight"][0] == (heads + 2 * groups) * dim // tp  # this TP rank's Q, K and V heads
