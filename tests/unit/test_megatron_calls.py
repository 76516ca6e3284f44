"""The record of what a job asked of Megatron (helpers/runtime/measure/megatron_calls.py) and its
translation into Megatron-LM's flags (helpers/rundir/megatron_flags.py) and command
(megatron_lm.py), on a config built here: the non-default fields are exactly the ones set,
Megatron-LM's own parser reads the flags back to the same values, and its parse_args +
validate_args accept or refuse a command (megatron_lm_check.py). The lessons' jobs end to end:
tests/jobs/test_megatron_lm.py."""
from pathlib import Path

import pytest
import torch
from megatron.core.transformer import TransformerConfig

from helpers.errors import MegatronRefused
from helpers.job.spec import JobSpec
from helpers.rundir import megatron_flags, megatron_lm, megatron_lm_check
from helpers.runtime.measure import megatron_calls


def _config(**kw):
    return TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True, **kw)


def test_non_defaults_are_the_fields_set_and_the_derived_ones():
    fields = megatron_calls.non_defaults(_config(tensor_model_parallel_size=2, sequence_parallel=True,
                                                 hidden_dropout=0.0))
    assert fields["tensor_model_parallel_size"] == 2 and fields["sequence_parallel"] is True
    assert fields["hidden_dropout"] == 0.0 and fields["num_layers"] == 2
    assert fields["ffn_hidden_size"] == 4 * 64  # derived by Megatron from hidden_size
    assert "attention_dropout" not in fields and "fp16" not in fields  # left at Megatron's defaults


def test_values_are_json_by_name():
    assert megatron_calls.jsonable(torch.bfloat16) == "bfloat16"
    assert megatron_calls.jsonable(_config().init_method).startswith("torch.nn.init.normal_(")


def _record(config, **model):
    return {"initialize_model_parallel": {"tensor_model_parallel_size": config.tensor_model_parallel_size},
            "TransformerConfig": {"class": "TransformerConfig", "fields": megatron_calls.non_defaults(config)},
            "model": [{"class": "GPTModel", "share_embeddings_and_output_weights": False, **model}],
            "transformer_impl": "local", "DistributedDataParallelConfig": {"use_distributed_optimizer": True},
            "OptimizerConfig": {"lr": 1e-4}, "batch": {"micro_batch_size": 2, "global_batch_size": 16}}


def test_flags_parse_back_to_the_recorded_values():
    config = _config(tensor_model_parallel_size=2, sequence_parallel=True, num_query_groups=2,
                     gated_linear_unit=True, activation_func=torch.nn.functional.silu, add_bias_linear=False)
    flags = megatron_flags.flags(_record(config, position_embedding_type="rope"))
    args = megatron_flags.parse(flags)
    assert (args.tensor_model_parallel_size, args.sequence_parallel) == (2, True)
    assert args.group_query_attention and args.num_query_groups == 2 and args.swiglu
    assert args.add_bias_linear is False and args.untie_embeddings_and_output_weights
    assert args.use_distributed_optimizer and args.lr == 1e-4
    assert (args.micro_batch_size, args.global_batch_size) == (2, 16)
    assert args.position_embedding_type == "rope"
    assert args.transformer_impl == "transformer_engine"  # what GPU users run; the kit's substitutes are comments


def test_a_value_no_flag_sets_is_reported_not_dropped():
    record = _record(_config())
    record["TransformerConfig"]["fields"]["a_field_megatron_lm_lacks"] = 3
    assert megatron_flags.unmapped(record) == {"a_field_megatron_lm_lacks": 3}
    assert not any("a-field" in f for f in megatron_flags.flags(record))


def test_the_kits_choices_for_its_own_machine_are_not_flags():
    """Fusions the kit turns off on CPU (or without apex/TE) are left to Megatron-LM's GPU defaults."""
    record = _record(_config(bias_dropout_fusion=False, masked_softmax_fusion=False))
    record["TransformerConfig"]["fields"]["use_cpu_initialization"] = True
    made = megatron_flags.flags(record)
    assert not any("fusion" in f or "cpu-init" in f for f in made), made
    assert megatron_flags.unmapped(record) == {}


def test_named_flags_are_spelled_by_megatron_lms_parser():
    assert megatron_flags.named({"train_iters": 5, "mock_data": True, "load": None, "skip_train": False}) == \
        ["--train-iters 5", "--mock-data"]
    assert megatron_flags.named({"rotary_base": 100000.0}) == ["--rotary-base 100000"]  # an int argument
    with pytest.raises(KeyError, match="no argument 'not_an_argument'"):
        megatron_flags.named({"not_an_argument": 1})


def test_the_vocabulary_megatron_lm_pads_to_is_the_models():
    """Megatron-LM pads the tokenizer's ids to a multiple of divisor x TP: the divisor is chosen so
    that multiple is the model's embedding size."""
    assert megatron_lm.vocab_divisor(512, 512, tp=4) == 128  # Megatron-LM's default
    assert megatron_lm.vocab_divisor(49152, 49152, tp=3) == 128
    assert megatron_lm.vocab_divisor(96, 96, tp=2) == 16
    assert megatron_lm.vocab_divisor(512, 258, tp=1) is None  # 258 ids pad to 384 or less, never 512


def test_the_scripts_arguments_read_back_with_quoted_paths(tmp_path):
    calls = {**_record(_config()), "data": {"kind": "text", "split": "90,5,5", "prefixes": {"all": "/data dir/all"},
                                            "tokenizer": {"name": "byte", "vocab_size": 258}}}
    calls["model"][0]["vocab_size"] = 512
    spec = JobSpec(data="/data dir/all", seq_len=64, save_interval=5, save_dir=str(tmp_path / "my ckpts"))
    text = megatron_lm.script(calls, spec, tmp_path / "a run")
    args = megatron_lm.arguments(text)
    assert args[args.index("--data-path") + 1] == "/data dir/all" and args[args.index("--split") + 1] == "90,5,5"
    # Megatron-LM saves into a folder of its own, never the kit's (save_dir or the run's checkpoints/)
    assert args[args.index("--save") + 1] == str(tmp_path / "a run" / "megatron-lm-checkpoints")
    assert "NullTokenizer" in args and args[args.index("--vocab-size") + 1] == "511"
    assert "# Where the kit's job differs:" in text and "byte tokenizer has no Megatron-LM type" in text


@pytest.mark.slow
def test_megatron_lm_checks_the_command_in_its_own_process():
    """parse_args + validate_args as on a Hopper GPU at the job's world size: accepted with the sizes
    Megatron-LM derives, or refused with its own message."""
    flags = ["--tensor-model-parallel-size", "2", "--sequence-parallel", "--num-layers", "4", "--hidden-size", "64",
             "--num-attention-heads", "4", "--seq-length", "64", "--max-position-embeddings", "64",
             "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "1", "--lr", "1e-3", "--bf16",
             "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "511"]
    accepted, refused = megatron_lm_check.check_many([(flags, 4), (flags, 3)])
    assert (accepted.tensor_model_parallel_size, accepted.data_parallel_size, accepted.world_size) == (2, 2, 4)
    assert accepted.transformer_impl == "transformer_engine"
    assert isinstance(refused, MegatronRefused) and "world size (3) is not divisible" in str(refused)


def test_the_script_gives_the_wheels_dataset_folder_a_makefile(tmp_path):
    """pretrain_gpt.py runs `make` in megatron/core/datasets, which the megatron-core wheel ships without
    a Makefile: the script writes one with an empty default target where none is, and make then passes."""
    import subprocess
    import sys

    calls = _record(_config())
    calls["model"][0]["vocab_size"] = 512
    text = megatron_lm.script(calls, JobSpec(), tmp_path)
    assert all(line in text for line in megatron_lm.DATASET_HELPERS)
    site = tmp_path / "site"  # an installed megatron-core (Python takes megatron.core from the first regular package)
    (site / "megatron" / "core" / "datasets").mkdir(parents=True)
    (site / "megatron" / "core" / "__init__.py").write_text("")
    guard = "\n".join(["set -euo pipefail", *megatron_lm.DATASET_HELPERS, 'make -s -C "$datasets"', 'echo "$datasets"'])
    done = subprocess.run(["bash", "-c", guard], capture_output=True, text=True, env={"PYTHONPATH": str(site),
                          "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(site / "megatron" / "core" / "datasets")
    assert (site / "megatron" / "core" / "datasets" / "Makefile").is_file()


def test_bf16_gradient_buffers_carry_into_megatron_lm_and_bridge(tmp_path):
    """grad_reduce_dtype='bf16': DDP's grad_reduce_in_fp32 off, --grad-reduce-in-bf16 in the command (else
    Megatron-LM's validate_args turns fp32 accumulation on for --bf16) and Bridge's bf16_mixed with
    grad_reduce_in_fp32=False (its setup() overrides the DDP config's); the default adds neither."""
    from helpers.rundir import bridge_recipe

    base = JobSpec(nproc=2, device="cpu", precision="bf16", seq_len=32, iters=1)
    for dtype, fp32 in (("fp32", True), ("bf16", False)):
        spec = JobSpec(**{**base.__dict__, "grad_reduce_dtype": dtype})
        calls = megatron_calls.planned(spec)
        assert calls["DistributedDataParallelConfig"].get("grad_reduce_in_fp32", False) is fp32
        args = megatron_lm.arguments(megatron_lm.script(calls, spec, tmp_path / dtype))
        assert ("--grad-reduce-in-bf16" in args, "--accumulate-allreduce-grads-in-fp32" in args) == (not fp32, fp32)
        recipe = bridge_recipe.recipe(calls, spec, tmp_path / dtype)
        compile(recipe, "bridge_recipe.py", "exec")
        assert ('mixed_precision="bf16_mixed",' in recipe) is fp32
        assert ("dataclasses.replace(bf16_mixed(), grad_reduce_in_fp32=False)" in recipe) is not fp32
