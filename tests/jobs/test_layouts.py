"""The kit's main claim: every parallel layout trains exactly what one process trains. Each layout
starts from the same seed checkpoint and sees the same global batches (fp32 on CPU), so its losses,
and the first iteration's gradient norm, must equal the single process's to floating-point
reduction order; no iteration is skipped, the report card passes, and every rank's live process
groups (groups.json) are the ones Megatron's RankGenerator predicts (Layout.rank_groups).

The lessons own the layouts they teach, and assert all of the above for each, on CPU within the
same 1e-5 over 5 iterations (lesson 09's 16 processes: 3):
  03 data parallel       DP=2 (DDP), DP=2 and DP=4 with the distributed optimizer      (tiny-gpt)
  04 tensor parallel     TP=2, TP=4                                                    (tiny-gpt)
  05 sequence parallel   TP=2 + SP, TP=4 + SP                                          (tiny-gpt)
  06 pipeline parallel   PP=2, PP=4, PP=2 x VPP=2, uneven PP=2 (1/3 layers)            (tiny-gpt)
  07 context parallel    CP=2, CP=4, TP=2 x CP=2                                       (tiny-gpt)
  08 expert parallel     EP=2 and EP=4 (alltoall), EP=2 (allgather), TP=2+SP x ETP=2 x EP=2
                                                                                (control-moe-cpu)
  09 process groups 5D   TP2 PP2 CP2 DP2, ETP1 EP4 EDP2 on 16 ranks                    (control-moe-cpu)

This test keeps what no lesson trains: expert data parallelism on its own (EP=2 on 4 ranks: every
expert on 2 ranks, expert gradients reduced over EDP=2), and MoE through an interleaved pipeline
with TP+SP and EP in one job, whose megatron.json is also read back through Megatron-LM's parser
(test_the_run_records_what_it_asked_of_megatron). Process groups of many more layouts, without
processes: tests/unit/test_megatron_groups.py."""
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
JOB = dict(model="tiny-moe", iters=5, micro_batch=2, global_batch=8)
LAYOUTS = {
    "ep2-edp2": dict(ep=2, nproc=4),  # each expert on 2 of 4 ranks: expert gradients over EDP
    # 4 microbatches through 2 stages of 2 chunks, each rank's half of the heads and its 4 of 8 experts
    "tp2-sp-pp2-vpp2-ep2": dict(tp=2, sp=True, pp=2, vpp=2, ep=2, etp=1, nproc=4),
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, two_at_a_time):
    """{name: RunDir or the exception its job raised}: the reference and every layout, each once."""
    jobs = {"one process": {}, **LAYOUTS}
    outs = {name: str(tmp_path_factory.mktemp(name)) for name in jobs}

    def one(name):
        return launch.run(out=outs[name], device="cpu", progress=False, **JOB, **jobs[name])

    return two_at_a_time(one, jobs)


def _ok(run):
    if isinstance(run, Exception):
        raise run
    return run


@pytest.mark.parametrize("name", LAYOUTS)
def test_layout_trains_what_one_process_trains(name, trained):
    run, ref = _ok(trained[name]), _ok(trained["one process"])
    assert len(run.losses) == JOB["iters"] and all(math.isfinite(x) for x in run.losses)
    assert run.losses[-1] < run.losses[0]
    assert max(abs(a - b) / b for a, b in zip(run.losses, ref.losses)) <= RTOL, (run.losses, ref.losses)
    # Adam's update hides a constant gradient factor from the losses; the first gradient norm does not.
    a, b = run.metrics[0]["grad_norm"], ref.metrics[0]["grad_norm"]
    assert abs(a - b) / b <= RTOL, (a, b)
    assert not any(m["skipped"] for m in run.metrics)
    layout = Layout.of(run.spec)
    assert probe.mismatches(layout, run.groups) == []  # live groups = Megatron's RankGenerator's
    assert run.report["passed"], run.report


def test_the_run_records_what_it_asked_of_megatron(trained):
    """megatron.json holds the TransformerConfig the workers built, and Megatron-LM's own parser
    reads the flags made from it back to the same values: TP+SP, PP+VPP and EP with its dispatcher."""
    from helpers.rundir import megatron_flags
    run = _ok(trained["tp2-sp-pp2-vpp2-ep2"])
    config = dict(tensor_model_parallel_size=2, sequence_parallel=True, pipeline_model_parallel_size=2,
                  virtual_pipeline_model_parallel_size=2, expert_model_parallel_size=2,
                  moe_token_dispatcher_type="alltoall")
    flags = ["--tensor-model-parallel-size 2", "--sequence-parallel", "--pipeline-model-parallel-size 2",
             "--num-virtual-stages-per-pipeline-rank 2", "--expert-model-parallel-size 2",
             "--moe-token-dispatcher-type alltoall"]
    calls = run.megatron
    fields = calls["TransformerConfig"]["fields"]
    assert {k: fields.get(k) for k in config} == config
    assert {k: calls["initialize_model_parallel"][k] for k in config if k in calls["initialize_model_parallel"]} \
        == {k: v for k, v in config.items() if k in calls["initialize_model_parallel"]}
    made = megatron_flags.flags(calls)
    assert set(flags) <= set(made), made
    args = megatron_flags.parse(made)
    assert args.tensor_model_parallel_size == fields["tensor_model_parallel_size"]
    assert args.sequence_parallel == fields["sequence_parallel"]
    assert args.pipeline_model_parallel_size == fields["pipeline_model_parallel_size"]
    assert args.num_virtual_stages_per_pipeline_rank == fields["virtual_pipeline_model_parallel_size"]
    assert args.expert_model_parallel_size == fields["expert_model_parallel_size"]
    assert args.moe_token_dispatcher_type == fields["moe_token_dispatcher_type"]
    assert args.num_layers == fields["num_layers"] and args.hidden_size == fields["hidden_size"]
    ranks = calls["modules"]
    assert len(ranks) == run.spec.world_size
    # every rank's modules are Megatron's classes with this rank's local shapes
    qkv = [r for r in ranks["0"] if r["name"].endswith("layers.0.self_attention.linear_qkv")]
    assert qkv and qkv[0]["class"] == "ColumnParallelLinear" and qkv[0]["module"].startswith("megatron.core")
    tp = fields["tensor_model_parallel_size"]
    heads, groups, dim = fields["num_attention_heads"], fields["num_query_groups"], fields["kv_channels"]
    assert qkv[0]["params"]["weight"][0] == (heads + 2 * groups) * dim // tp  # this TP rank's Q, K and V heads


def test_the_run_writes_the_same_job_for_megatron_lm_and_bridge(trained):
    """Rank 0 writes megatron-lm.sh and bridge_recipe.py from megatron.json; Megatron-LM's own
    parse_args + validate_args and Bridge's config() + runtime_config_update accept them with the
    job's sizes, and the record made without starting a job (megatron_calls.planned, what
    tests/jobs/test_megatron_lm.py checks the lessons' jobs with) is the one the job wrote."""
    from helpers.rundir import bridge_recipe, megatron_lm_check, names
    from helpers.runtime.measure import megatron_calls
    run = _ok(trained["tp2-sp-pp2-vpp2-ep2"])
    spec = run.spec
    args = megatron_lm_check.check_megatron_lm_command(run.path / names.MEGATRON_LM_SCRIPT, spec.world_size)
    [cfg] = bridge_recipe.check_bridge_recipes([(run.path / names.BRIDGE_RECIPE, spec.world_size)])
    assert isinstance(cfg, dict), cfg  # not a MegatronRefused
    sizes = dict(tensor_model_parallel_size=2, sequence_parallel=True, pipeline_model_parallel_size=2,
                 expert_model_parallel_size=2, expert_tensor_parallel_size=1, context_parallel_size=1,
                 micro_batch_size=2, global_batch_size=8, data_parallel_size=1)
    assert {k: getattr(args, k) for k in sizes} == sizes and args.num_virtual_stages_per_pipeline_rank == 2
    assert {k: cfg[k] for k in sizes} == sizes and cfg["virtual_pipeline_model_parallel_size"] == 2
    assert "SequenceParallelNorm" in (run.path / names.MEGATRON_LM_SCRIPT).read_text()  # the substitute named
    recorded, planned = run.megatron, megatron_calls.planned(spec)
    for part in ("initialize_model_parallel", "TransformerConfig", "DistributedDataParallelConfig",
                 "OptimizerConfig", "get_forward_backward_func", "batch", "data"):
        assert planned[part] == recorded[part], part
    assert planned["model"] == recorded["model"]
