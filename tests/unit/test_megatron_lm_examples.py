"""Megatron-LM's own example training scripts (core_r0.19.0's examples/, their flags in
tests/data/megatron_lm_examples.json, shell variables resolved to each script's defaults) read
through the kit's Megatron-LM reader (helpers/launch/from_megatron.py) and planned on the GPU count
each script is written for.

What holds for every script: the reader takes the command or refuses it by name, a command it takes
becomes a layout of the script's GPU count, and the memory plan answers. What the reader does not
carry yet: the flags that change memory or time (class "a" of the data file's flag_classes) it still
lists as ignored, per script in `memory_time_flags_not_carried`: the test holds the reader to that
list exactly, so a flag the reader learns must leave it and a flag it starts to drop fails."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from helpers.errors import InvalidJob
from helpers.launch import from_megatron

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "megatron_lm_examples.json").read_text())
EXAMPLES = {e["name"]: e for e in DATA["examples"]}
# Flags that pretrain_gpt.py adds through ModelOpt's argument provider (Megatron-LM's post_training arguments)
# and flags Megatron-LM core_r0.19.0 no longer has: a reader built on add_megatron_arguments alone refuses them.
NOT_IN_PARSER = {"--enable-gpt-oss", "--export-force-local-attention", "--DDP-impl", "--activations-checkpoint-method"}


def _command(example: dict) -> str:
    return shlex.join(example.get("args_current", example["args"]))


def test_data_file_holds_flag_lists_and_gpu_counts():
    assert DATA["branch"] == "core_r0.19.0"
    for e in DATA["examples"]:
        assert e["script"].startswith("examples/") and e["entry"].startswith("pretrain_")
        assert e["gpus"] == e["nodes"] * e["gpus_per_node"], e["name"]
        for words in (e["args"], e.get("args_current", [])):
            assert all(isinstance(w, str) for w in words) and "$" not in " ".join(words), e["name"]
        assert e["choices"], e["name"]  # every value chosen here is named
    assert set(DATA["flag_classes"].values()) <= {"a", "b", "c"}


@pytest.mark.parametrize("name", [n for n, e in EXAMPLES.items() if "args_current" in e])
def test_legacy_flags_are_refused_by_name(name):
    with pytest.raises(InvalidJob, match="--DDP-impl|--activations-checkpoint-method"):
        from_megatron.read_megatron_args(shlex.join(EXAMPLES[name]["args"]))


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_example_is_read_or_refused_and_planned(name):
    example = EXAMPLES[name]
    try:
        reading = from_megatron.read_megatron_args(_command(example))
    except InvalidJob as e:
        assert any(flag in str(e) for flag in NOT_IN_PARSER), str(e)
        return
    spec = reading.spec(nproc=example["gpus"])
    assert spec.world_size == example["gpus"]
    text = from_megatron.plan_text(spec, "h100-80gb")
    assert f"memory plan on {example['gpus']} x" in text and "GiB per GPU" in text, text


@pytest.mark.parametrize("name", sorted(n for n, e in EXAMPLES.items() if "memory_time_flags_not_carried" in e))
def test_the_memory_or_time_flags_the_reader_drops_are_the_known_ones(name):
    example = EXAMPLES[name]
    reading = from_megatron.read_megatron_args(_command(example))
    dropped = sorted(k for k in reading.ignored if DATA["flag_classes"].get(k) == "a")
    assert dropped == example["memory_time_flags_not_carried"], dropped


def test_grad_reduce_in_bf16_halves_the_planned_gradient_buffers():
    """Llama-3-8B FP8 (--grad-reduce-in-bf16): bf16 gradient buffers, 2 bytes per parameter less than
    the fp32 ones Megatron-LM's validate_args gives a bf16 run without the flag (~15 GiB at TP=PP=1)."""
    import dataclasses

    from helpers.job.layout import Layout
    from helpers.memory.plan import plan_memory
    from helpers.memory.training import Training

    spec = from_megatron.read_megatron_args(_command(EXAMPLES["llama3_8b_h100_fp8"])).spec(nproc=8, device="cuda")
    assert spec.grad_reduce_dtype == "bf16"

    def gradients(s):
        plan = plan_memory(s.model_preset(), Layout.of(s), Training.of(s))
        return max(stage.terms["gradients"] for stage in plan.stages) / 2**30

    fp32 = gradients(dataclasses.replace(spec, grad_reduce_dtype="fp32"))
    assert 14 < fp32 - gradients(spec) < 16 and fp32 / gradients(spec) == pytest.approx(2, rel=1e-3)
