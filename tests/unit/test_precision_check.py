"""precision='fp8' (helpers/job/rules/precision.py, helpers/precision/hardware.py): refused
before any process starts on the CPU, on GPUs without FP8 tensor cores, for a recipe the GPU
lacks and for GEMM shapes torch._scaled_mm cannot take; when it can run, the local backend's
layer spec really holds the kit's FP8 linears (no silent bf16). Each GPU is an Environment made
up from its compute capability, so every case runs on a CPU machine."""
from __future__ import annotations

import dataclasses

import pytest

from helpers import launch
from helpers.errors import InvalidJob
from helpers.job import rules
from helpers.job.rules.environment import Environment
from helpers.job.spec import JobSpec
from helpers.launch import cli, runner
from helpers.precision import hardware

HOPPER, ADA, AMPERE, BLACKWELL = (hardware.support(c) for c in [(9, 0), (8, 9), (8, 0), (10, 0)])


def gpu_job(**kw) -> JobSpec:
    return JobSpec(precision="fp8", device="cuda", backend="local", seq_len=64, **kw)


def check(spec: JobSpec, support=None) -> None:
    """Every rule for `spec` on a machine with one GPU of `support` and Transformer Engine installed
    (none: this machine's CPU)."""
    env = rules.CPU_ONLY if support is None else Environment(cuda_devices=1, fp8_recipes=support.fp8_recipes,
                                                             fp8_note=support.message(), te_installed=True)
    rules.check(rules.resolve(spec, env), env).refuse()


def test_fp8_on_cpu_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(InvalidJob, match=r"precision='fp8' needs a GPU with FP8 tensor cores.*runs on cpu"):
        launch.run(precision="fp8", device="cpu", out=str(tmp_path), progress=False)
    assert not any(tmp_path.iterdir())  # no run directory, no seed checkpoint, no process


@pytest.mark.parametrize("support, match", [
    (AMPERE, r"compute capability 8.0 \(Ampere\): no FP8 tensor cores"),
    (hardware.support((7, 0)), "Volta or older"),
])
def test_fp8_on_a_gpu_without_fp8_is_refused(support, match):
    spec = gpu_job()
    with pytest.raises(InvalidJob, match=match):
        check(spec, support)


def test_recipes_per_generation():
    assert HOPPER.fp8_recipes == ("tensorwise", "rowwise", "delayed") and not HOPPER.mxfp8
    assert ADA.fp8_recipes == ("tensorwise", "delayed") and BLACKWELL.mxfp8
    assert "no MXFP8 (Blackwell only" in HOPPER.message() and "MXFP8 in hardware" in BLACKWELL.message()
    assert hardware.support(None).message().startswith("no GPU: FP8 GEMMs need a GPU")
    spec = gpu_job(fp8_recipe="rowwise")
    check(spec, HOPPER)  # runs
    with pytest.raises(InvalidJob, match=r"fp8_recipe='rowwise' cannot run here.*Ada.*\['tensorwise', 'delayed'\]"):
        check(spec, ADA)
    delayed = gpu_job(fp8_recipe="delayed")
    check(delayed, ADA)  # tensorwise GEMMs: runs


def test_shapes_scaled_mm_cannot_take_are_named():
    spec = dataclasses.replace(gpu_job(), model_overrides={"hidden_size": 72, "num_attention_heads": 4,
                                                           "ffn_hidden_size": 200})
    with pytest.raises(InvalidJob, match=r"multiple of 16.*hidden_size = 72.*ffn_hidden_size / tp = 200"):
        check(spec, HOPPER)


def test_te_takes_tensorwise_and_delayed_and_other_precisions_pass():
    spec = dataclasses.replace(gpu_job(fp8_recipe="rowwise"), backend="te")
    with pytest.raises(InvalidJob, match="with backend='te' use fp8_recipe='tensorwise' or 'delayed'"):
        check(spec, HOPPER)
    for recipe in ("tensorwise", "delayed"):  # Megatron's own fp8_recipe names for TE
        te = dataclasses.replace(gpu_job(fp8_recipe=recipe), backend="te")
        check(te, HOPPER)
    bf16 = JobSpec(precision="bf16", device="cpu")
    check(bf16)  # nothing to check


def test_cli_and_spec():
    args = cli.parser().parse_args(["--precision", "fp8", "--fp8-recipe", "rowwise"])
    assert (args.precision, args.fp8_recipe) == ("fp8", "rowwise")
    assert cli.parser().parse_args(["--fp8-recipe", "delayed"]).fp8_recipe == "delayed"
    assert JobSpec(precision="fp8").bf16 and JobSpec(precision="bf16").bf16 and not JobSpec(precision="fp32").bf16
    with pytest.raises(InvalidJob, match="precision must be"):
        runner.validate(JobSpec(precision="fp16"))


def test_fp8_job_swaps_the_transformer_linears():
    """What the worker builds for a dense and an MoE layer: the four linears of attention and
    the dense MLP become the kit's FP8 ones; the experts stay bf16; without fp8 nothing changes."""
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear

    from helpers.runtime import build
    from helpers.runtime.layers import fp8_linear
    from helpers.runtime.layers import specs as layer_specs

    spec = dataclasses.replace(gpu_job(), device="cpu")
    config = build.transformer_config(spec.model_preset(), spec, on_cpu=True, bf16=True)
    column, row = fp8_linear.linears("tensorwise")
    dense = layer_specs.layer_spec(config, False, "sdpa", "tensorwise")
    att, mlp = dense.submodules.self_attention.submodules, fp8_linear.dense_mlp_submodules(dense.submodules.mlp)
    assert (att.linear_qkv, att.linear_proj, mlp.linear_fc1, mlp.linear_fc2) == (column, row, column, row)
    assert issubclass(column, ColumnParallelLinear) and column.fp8_recipe == "tensorwise"
    assert fp8_linear.use_in(layer_specs.layer_spec(config, False, "sdpa"), "rowwise") == 4
    plain = layer_specs.layer_spec(config, False, "sdpa")
    assert plain.submodules.self_attention.submodules.linear_qkv is ColumnParallelLinear
    assert build.local_fp8_recipe(dataclasses.replace(spec, backend="te")) is None
    delayed_column, _ = fp8_linear.linears("delayed")  # its amax histories: made once, kept by the linear
    linear = object.__new__(delayed_column)
    assert fp8_linear.delayed_streams(linear) is fp8_linear.delayed_streams(linear) is not None
    assert fp8_linear.delayed_streams(object.__new__(column)) is None
    assert build.te_fp8_fields(dataclasses.replace(spec, backend="te")) == {"fp8": "hybrid", "fp8_recipe": "tensorwise"}


def test_fp8_output_layer_needs_local_fp8_and_a_vocabulary_scaled_mm_takes():
    for spec in (JobSpec(precision="bf16", device="cuda", fp8_output_layer=True),
                 dataclasses.replace(gpu_job(), backend="te", fp8_output_layer=True)):
        with pytest.raises(InvalidJob, match=r"fp8_output_layer .* needs precision='fp8' on the local backend"):
            check(spec, HOPPER)
    odd = gpu_job(fp8_output_layer=True, model_overrides={"vocab_size": 258})  # the byte tokenizer's
    with pytest.raises(InvalidJob, match=r"vocab_size / tp \(fp8_output_layer\) = 258"):
        check(odd, HOPPER)
    check(dataclasses.replace(odd, fp8_output_layer=False), HOPPER)  # bf16 logits
    assert cli.parser().parse_args(["--fp8-output-layer"]).fp8_output_layer is True
