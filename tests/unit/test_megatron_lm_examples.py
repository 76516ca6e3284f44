"""Megatron-LM's own example training scripts (core_r0.19.0's examples/, their flags in
tests/data/megatron_lm_examples.json, shell variables resolved to each script's defaults) read
through the kit's Megatron-LM reader (helpers/launch/from_megatron.py) and planned where NVIDIA
runs each script's model.

What holds for every script: the reader takes the command or refuses it by name as Megatron-LM
would; every flag that changes memory or time (class "a" of the data file's flag_classes) is
carried into the job and its plan, or named with what it does instead, never left "ignored"; and
the memory plan of the script's own GPU count says it fits on the GPU NVIDIA runs it on."""
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
def test_what_megatron_lm_refuses_as_shipped_is_refused_by_name(name):
    """Flags core_r0.19.0 no longer has (SC21), and a batch schedule beside a global batch, which
    its validate_args refuses (GPT-3 175B); args_current is the same job as Megatron-LM takes it."""
    with pytest.raises(InvalidJob, match="--DDP-impl|--activations-checkpoint-method|--step-batch-size-schedule"):
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


@pytest.mark.parametrize("name", sorted(n for n in EXAMPLES if n != "gpt_oss_small"))
def test_no_flag_that_changes_memory_or_time_is_ignored(name):
    reading = from_megatron.read_megatron_args(_command(EXAMPLES[name]))
    dropped = sorted(k for k in reading.ignored if DATA["flag_classes"].get(k) == "a")
    assert dropped == [], dropped


@pytest.mark.parametrize("name", sorted(n for n, e in EXAMPLES.items() if "plan_gpu" in e))
def test_each_script_fits_where_nvidia_runs_it(name):
    example = EXAMPLES[name]
    reading = from_megatron.read_megatron_args(_command(example))
    spec = reading.spec(nproc=example["gpus"], **example["nvidia_layout"])
    text = from_megatron.plan_text(spec, example["plan_gpu"])
    assert ": fits (" in text, text


def test_the_llama_fp8_script_as_shipped_does_not_fit_where_its_readme_runs_cp2():
    """The Llama-3-8B FP8 script sets CP=1 at sequence 8192 on 8 H100s without FSDP; its README's
    own performance row runs CP=2. The plan says why: the activations of 8192 tokens per GPU."""
    spec = from_megatron.read_megatron_args(_command(EXAMPLES["llama3_8b_h100_fp8"])).spec(nproc=8)
    shipped = from_megatron.plan_text(spec, "h100-80gb")
    assert ": does not fit (" in shipped and "largest: activations" in shipped, shipped


def test_planned_features_change_the_plan_as_megatron_lays_them_out():
    """Megatron-FSDP (optim_grads_params) shards parameters, gradients and optimizer state over the
    8 data-parallel ranks; FP8 parameters take 1 byte per linear weight; the TE backend's fused
    SwiGLU and FP8 GEMM inputs keep fewer activation bytes than the local one."""
    import dataclasses

    from helpers.job.layout import Layout
    from helpers.memory.plan import plan_memory
    from helpers.memory.training import Training

    spec = dataclasses.replace(from_megatron.read_megatron_args(_command(EXAMPLES["llama3_8b_fsdp_h100_fp8"]))
                               .spec(nproc=8), device="cuda", backend="te")
    assert (spec.megatron_fsdp, spec.precision, spec.fp8_param_gather) == ("optim_grads_params", "fp8", True)

    def terms(s, backend="te"):
        plan = plan_memory(s.model_preset(), Layout.of(s, backend=backend), Training.of(s))
        return {k: v / 2**30 for k, v in plan.stages[0].terms.items()}

    fsdp, ddp = terms(spec), terms(dataclasses.replace(spec, megatron_fsdp=None))
    # 8.0 B parameters: ZeRO-3 over 8 ranks keeps an eighth of the fp32 gradients (ddp: all of them)
    assert ddp["gradients"] / fsdp["gradients"] == pytest.approx(8, rel=1e-3)
    assert ddp["parameters"] / fsdp["parameters"] == pytest.approx(8, rel=1e-3)
    bf16_weights = terms(dataclasses.replace(spec, megatron_fsdp=None, fp8_param_gather=False))
    linear_weights = 6.98e9 / 2**30  # Llama-3-8B's 32 layers of q, k, v, o, gate, up and down projections
    assert bf16_weights["parameters"] - ddp["parameters"] == pytest.approx(linear_weights, rel=0.01)
    local = terms(dataclasses.replace(spec, megatron_fsdp=None), backend="local")
    assert ddp["activations"] < 0.85 * local["activations"]


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
