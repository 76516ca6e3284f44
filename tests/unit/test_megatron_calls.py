"""The record of what a job asked of Megatron (helpers/runtime/measure/megatron_calls.py) and its
translation into Megatron-LM's flags (helpers/rundir/megatron_flags.py), on a config built here:
the non-default fields are exactly the ones set, and Megatron-LM's own parser reads the flags back
to the same values."""
import torch
from megatron.core.transformer import TransformerConfig

from helpers.rundir import megatron_flags
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
    assert args.position_embedding_type == "rope" and args.transformer_impl == "local"


def test_a_value_no_flag_sets_is_reported_not_dropped():
    record = _record(_config())
    record["TransformerConfig"]["fields"]["a_field_megatron_lm_lacks"] = 3
    assert megatron_flags.unmapped(record) == {"a_field_megatron_lm_lacks": 3}
    assert not any("a-field" in f for f in megatron_flags.flags(record))
