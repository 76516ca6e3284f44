"""Every job of lessons 03-09 and 18, written out as the two things users run on GPU clusters and
checked by those tools' own code on CPU: megatron-lm.sh through Megatron-LM's parse_args +
validate_args (at the job's world size, as on a Hopper GPU), bridge_recipe.py through
Megatron-Bridge's config() + runtime_config_update (what pretrain() runs before it initializes).
The parsed TP/PP/VPP/CP/EP/ETP/SP, data-parallel size and batch sizes must be the job's.

No job starts: each spec is resolved as the lessons' launch.run calls resolve it, and its record is
made by megatron_calls.planned (the config, model arguments and data the worker would build;
tests/jobs/test_layouts.py checks that a trained job's record equals it). The lesson-17 jobs read
SmolLM2-135M (made once from its package, helpers/launch/pretrained.py) and WikiText (KIT_DATA_DIR).
Three processes in all: the records here, one for every Megatron-LM check, one for every recipe."""
import pytest

from helpers.errors import MegatronRefused
from helpers.job import rules
from helpers.job.layout import Layout
from helpers.job.spec import JobSpec
from helpers.launch import pretrained, runner
from helpers.rundir import bridge_recipe, megatron_lm, megatron_lm_check

# The lessons' launch.run calls, with their parameters' defaults (notebooks/NN_*.ipynb); lesson 06's
# one process is lesson 03's, the same spec, checked once.
L03 = dict(model="tiny-gpt", iters=3, seq_len=32, global_batch=8, micro_batch=2)
L04 = dict(model="tiny-gpt", iters=3, seq_len=32, micro_batch=2)
L05 = dict(model="tiny-gpt", iters=3, seq_len=64, micro_batch=2)
L06 = dict(model="tiny-gpt", iters=3, seq_len=32, micro_batch=2, global_batch=8)
L07 = dict(model="tiny-gpt", iters=4, seq_len=64, micro_batch=2, global_batch=4)
L08 = dict(model="control-moe-cpu", iters=3, seq_len=32, micro_batch=1, global_batch=4)
L09 = dict(iters=2, data="wikitext", eval_iters=1)
LESSON_JOBS = {
    "03 one process": L03, "03 DP=2": dict(L03, nproc=2), "03 DP=2 + dist. opt.": dict(L03, nproc=2, dist_opt=True),
    "03 DP=4 + dist. opt.": dict(L03, nproc=4, dist_opt=True),
    "04 one process": L04, "04 TP=2": dict(L04, tp=2), "04 TP=4": dict(L04, tp=4),
    "05 one process": L05, "05 TP=2": dict(L05, tp=2), "05 TP=2 + SP": dict(L05, tp=2, sp=True),
    "05 TP=4 + SP": dict(L05, tp=4, sp=True),
    "06 PP=2": dict(L06, pp=2), "06 PP=4": dict(L06, pp=4),
    "06 PP=2 x VPP=2": dict(L06, pp=2, vpp=2), "06 PP=2 uneven 1/3": dict(L06, pp=2, first_stage_layers=1,
                                                                          last_stage_layers=3),
    "07 one process": L07, "07 CP=2": dict(L07, cp=2), "07 CP=4": dict(L07, cp=4), "07 TP=2 x CP=2": dict(L07, tp=2, cp=2),
    "08 one process": L08, "08 EP=2 (alltoall)": dict(L08, ep=2, nproc=2), "08 EP=4 (alltoall)": dict(L08, ep=4, nproc=4),
    "08 EP=2 (allgather)": dict(L08, ep=2, nproc=2, moe_dispatcher="allgather"),
    "08 TP=2+SP, ETP=2 x EP=2": dict(L08, tp=2, sp=True, ep=2, etp=2, nproc=4),
    "08 top-2 EP=4": dict(L08, iters=1, ep=4, nproc=4, model_overrides={"moe_router_topk": 2}),
    "09 one process": dict(L09, model="control-moe-cpu", seq_len=32, micro_batch=1, global_batch=4),
    "09 16 ranks": Layout.on(2, 8, tp=2, pp=2, cp=2, ep=4, etp=1, sp=True, seq_len=32, micro_batch=1,
                             global_batch=4).job_spec("control-moe-cpu", save_interval=2, **L09).to_dict(),
}
LESSON_17 = {  # WikiText and the kit's generated conversations stand in where the lesson writes its own text
    "18 validation before training PP=2": dict(data="wikitext", pp=2, iters=0, seq_len=256, micro_batch=1,
                                               global_batch=2, eval_iters=2),
    "18 continued pretraining PP=2": dict(data="wikitext", pp=2, iters=4, seq_len=128, micro_batch=1, global_batch=2,
                                          lr=3e-4, eval_iters=2, data_split="80,10,10"),
    "18 SFT PP=2": dict(data="sft", pp=2, iters=6, seq_len=64, micro_batch=2, global_batch=4, lr=1e-4, eval_iters=1,
                        data_split="80,10,10", save_interval=6),
    "18 resumed at TP=3": dict(data="sft", tp=3, iters=8, load_dir="sft/checkpoints", seq_len=64, micro_batch=2,
                               global_batch=4, lr=1e-4, eval_iters=1, data_split="80,10,10", export_hf="export"),
}
SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
         "expert_model_parallel_size", "expert_tensor_parallel_size", "sequence_parallel", "micro_batch_size",
         "global_batch_size", "data_parallel_size")


def expected(spec) -> dict:
    return dict(zip(SIZES, (spec.tp, spec.pp, spec.cp, spec.ep, spec.expert_tp, spec.sp, spec.micro_batch,
                            spec.global_batch_size, spec.dp)))


def resolved(job: dict, tmp_path):
    """The spec as launch.run resolves it on this CPU machine; a checkpoint to load is the lesson's
    own (not made here), the only problem let through."""
    job = {k: (str(tmp_path / v) if k in ("load_dir", "export_hf") and v else v) for k, v in job.items()}
    found_spec, found = runner.check(JobSpec(**{**job, "device": "cpu"}), rules.CPU_ONLY)
    problems = [v for v in found.violations if v.category != "checkpoint"]
    assert not problems, problems
    return found_spec.spec


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """{lesson job: (spec, megatron-lm.sh path, bridge_recipe.py path)}."""
    from helpers.runtime.measure import megatron_calls

    folder = str(pretrained.smollm2())
    jobs = {**LESSON_JOBS, **{name: {**job, "hf_model": folder} for name, job in LESSON_17.items()}}
    out = {}
    for name, job in jobs.items():
        run_dir = tmp_path_factory.mktemp("run")
        spec = resolved(job, run_dir)
        calls = megatron_calls.planned(spec)
        out[name] = (spec, megatron_lm.write(run_dir, calls, spec), bridge_recipe.write(run_dir, calls, spec))
    return out


@pytest.fixture(scope="module")
def megatron_lm_args(written):
    checked = megatron_lm_check.check_many([(script, spec.world_size) for spec, script, _ in written.values()])
    return dict(zip(written, checked))


@pytest.fixture(scope="module")
def bridge_configs(written):
    checked = bridge_recipe.check_bridge_recipes([(recipe, spec.world_size) for spec, _, recipe in written.values()])
    return dict(zip(written, checked))


NAMES = list(LESSON_JOBS) + list(LESSON_17)


@pytest.mark.parametrize("name", NAMES)
def test_megatron_lm_accepts_the_lesson_job_with_its_layout(name, written, megatron_lm_args):
    spec, script, _ = written[name]
    args = megatron_lm_args[name]
    if isinstance(args, MegatronRefused):
        raise args
    assert {k: getattr(args, k) for k in SIZES} == expected(spec), script.read_text()
    assert (args.num_virtual_stages_per_pipeline_rank or None) == spec.vpp
    assert (args.decoder_first_pipeline_num_layers, args.decoder_last_pipeline_num_layers) == \
        (spec.first_stage_layers, spec.last_stage_layers)
    assert args.world_size == spec.world_size
    assert args.transformer_impl == "transformer_engine" and args.bf16
    assert args.train_iters == spec.iters and args.seq_length == spec.seq_len
    assert args.mock_data == (spec.data == "synthetic")


@pytest.mark.parametrize("name", NAMES)
def test_bridge_builds_the_lesson_job_with_its_layout(name, written, bridge_configs):
    spec, _, recipe = written[name]
    cfg = bridge_configs[name]
    if isinstance(cfg, MegatronRefused):
        raise cfg
    assert {k: cfg[k] for k in SIZES} == expected(spec), recipe.read_text()
    assert cfg["virtual_pipeline_model_parallel_size"] == spec.vpp
    assert (cfg["num_layers_in_first_pipeline_stage"], cfg["num_layers_in_last_pipeline_stage"]) == \
        (spec.first_stage_layers, spec.last_stage_layers)
    assert cfg["bf16"] and cfg["seq_length"] == spec.seq_len and cfg["train_iters"] == spec.iters
    # Megatron's local layer spec where its local modules take the layout (no SP, CP = 1), as the kit's job
    assert cfg["layer_spec"] == ("local_layer_spec" if not spec.sp and spec.cp == 1 else "default_layer_spec")
    assert cfg["dataset_class"] == ("MockGPTDatasetConfig" if spec.data == "synthetic" else "GPTDatasetConfig")
    if spec.hf_model:
        assert cfg["tokenizer_type"] == "HuggingFaceTokenizer" and cfg["vocab_size"] == 49152
