"""The name table (helpers/job/megatron_names.py) against the installed code: every Megatron-Core
name is a field of its config class or an argument of initialize_model_parallel, every Megatron-LM
name a dest of Megatron-LM's parser, every Bridge name a field of its ConfigContainer section; every
JobSpec field is in the table or in KIT_ONLY. Importing Bridge's training config takes a few seconds
(with the kit's Transformer Engine stand-in)."""
import dataclasses
import functools
import inspect
import typing

import pytest

from helpers.job import megatron_names as mn
from helpers.job.models import ModelPreset
from helpers.job.spec import JobSpec


def _fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


@functools.cache
def core_names() -> dict[str, set[str]]:
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.transformer import MLATransformerConfig

    return {mn.PARALLEL_STATE: set(inspect.signature(parallel_state.initialize_model_parallel).parameters),
            mn.TRANSFORMER_CONFIG: _fields(MLATransformerConfig),  # TransformerConfig's fields and MLA's
            mn.DDP_CONFIG: _fields(DistributedDataParallelConfig), mn.OPTIMIZER_CONFIG: _fields(OptimizerConfig)}


@functools.cache
def lm_dests() -> set[str]:
    from helpers.rundir import megatron_flags

    return {a.dest for a in megatron_flags.parser()._actions}


@functools.cache
def bridge_sections() -> dict[str, set[str]]:
    """ConfigContainer's sections -> their fields (the model section: GPT's and MLA's providers)."""
    import warnings

    import megatron.core  # noqa: F401  (before Bridge: the TE stand-in relies on it)

    from helpers.runtime.hf import te_standin

    with warnings.catch_warnings(), te_standin.training_config_imports():
        warnings.simplefilter("ignore")
        from megatron.bridge.models.gpt_provider import GPTModelProvider
        from megatron.bridge.models.mla_provider import MLAModelProvider
        from megatron.bridge.training import config
        from megatron.bridge.training.mixed_precision import MixedPrecisionConfig
    sections = {}
    for name, hint in typing.get_type_hints(config.ConfigContainer).items():
        classes = [c for c in typing.get_args(hint) or (hint,) if dataclasses.is_dataclass(c)]
        if classes:
            sections[name] = set().union(*(_fields(c) for c in classes))
    sections.update(model=_fields(GPTModelProvider) | _fields(MLAModelProvider), mixed_precision=_fields(MixedPrecisionConfig),
                    dataset=_fields(config.GPTDatasetConfig))
    return sections


ROWS = {f"{n.owner}.{n.kit or n.core}": n for n in mn.TABLE}


@pytest.mark.parametrize("row", ROWS)
def test_each_megatron_core_name_is_a_field_of_its_object(row):
    n = ROWS[row]
    assert set(n.objects) <= set(mn.OBJECTS)
    for obj in n.objects:
        if obj == mn.BATCH:  # recorded under Megatron-LM's names (checked below)
            assert n.lm_name == n.core
        else:
            assert n.core in core_names()[obj], f"{obj} has no {n.core}"


@pytest.mark.parametrize("row", ROWS)
def test_each_megatron_lm_name_is_an_argument_of_its_parser(row):
    n = ROWS[row]
    if n.lm_name is not None:
        assert n.lm_name in lm_dests(), f"Megatron-LM has no args.{n.lm_name}"


@pytest.mark.parametrize("row", ROWS)
def test_each_bridge_name_is_a_field_of_its_section(row):
    n = ROWS[row]
    if n.bridge_name is not None:
        assert n.bridge_field in bridge_sections().get(n.bridge_section, set()), f"Bridge has no {n.bridge_name}"


def test_every_jobspec_field_is_in_the_table_or_kit_only():
    named = {n.kit for n in mn.SPEC_NAMES}
    fields = {f.name for f in dataclasses.fields(JobSpec)}
    assert not named & set(mn.KIT_ONLY), "a field both mapped and kit-only"
    assert fields - named - set(mn.KIT_ONLY) == set(), "JobSpec fields neither mapped nor kit-only"
    assert (named | set(mn.KIT_ONLY)) - {None} <= fields, "rows naming fields JobSpec no longer has"
    assert all(reason.strip() for reason in mn.KIT_ONLY.values())


def test_model_rows_name_preset_fields():
    fields = {f.name for f in dataclasses.fields(ModelPreset)} | {"expert_ffn"}
    assert {n.kit for n in mn.MODEL_NAMES} <= fields
    assert all(n.resolved in fields for n in mn.MODEL_NAMES if isinstance(n.resolved, str))


def test_renamed_is_what_differs_between_megatron_core_and_megatron_lm():
    assert mn.RENAMED == {"virtual_pipeline_model_parallel_size": "num_virtual_stages_per_pipeline_rank",
                          "num_layers_in_first_pipeline_stage": "decoder_first_pipeline_num_layers",
                          "num_layers_in_last_pipeline_stage": "decoder_last_pipeline_num_layers",
                          "grad_reduce_in_fp32": "accumulate_allreduce_grads_in_fp32",
                          "bucket_size": "ddp_bucket_size", "num_moe_experts": "num_experts"}
    assert all(mn.CORE_OF_LM[lm] == core for core, lm in mn.RENAMED.items())


def test_values_convert_both_ways():
    spec = JobSpec(tp=2, etp=None, overlap_grad_reduce="on", overlap_param_gather="off", iters=7, nproc=4,
                   load_dir=["a", "b"], load_optimizer=False, collective_timeout_s=90.0)
    assert mn.core_values(spec, mn.PARALLEL_STATE) == {
        "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 1, "virtual_pipeline_model_parallel_size": None,
        "context_parallel_size": 1, "expert_model_parallel_size": 1, "expert_tensor_parallel_size": 2,  # etp none = tp
        "distributed_timeout_minutes": 1.5}
    ddp = mn.core_values(spec, mn.DDP_CONFIG)
    assert ddp["overlap_grad_reduce"] is True and ddp["overlap_param_gather"] is False
    assert ddp["bucket_size"] == spec.overlap_bucket_size and ddp["grad_reduce_in_fp32"] is True
    assert mn.of_kit("overlap_grad_reduce").kit_from(True) == "on"
    bf16_grads = dataclasses.replace(spec, grad_reduce_dtype="bf16")
    assert mn.core_values(bf16_grads, mn.DDP_CONFIG)["grad_reduce_in_fp32"] is False
    assert mn.of_kit("grad_reduce_dtype").kit_from(False) == "bf16"
    assert mn.lm_values(spec, ("lr_decay_iters", "load_dir", "load_optimizer")) == {
        "lr_decay_iters": 7, "load": "a", "no_load_optim": True}  # none = iters; the first; inverted
    assert mn.bridge_values(spec, ("load_optimizer", "vpp")) == {"load_optim": False,
                                                                 "virtual_pipeline_model_parallel_size": None}
    assert mn.of_kit("backend").kit_from("transformer_engine") == "te"
    moe = dataclasses.replace(spec, moe_dispatcher="allgather")
    assert mn.core_values(moe, mn.TRANSFORMER_CONFIG, model_kind="moe")["moe_token_dispatcher_type"] == "allgather"
    assert "moe_token_dispatcher_type" not in mn.core_values(moe, mn.TRANSFORMER_CONFIG)  # dense models: not set


def test_load_dirs_keep_the_paths_as_written():
    assert JobSpec(load_dir="$CKPT/x").load_dirs() == ["$CKPT/x"]
    assert JobSpec(load_dir=["a", "b"]).load_dirs() == ["a", "b"] and JobSpec().load_dirs() == []
