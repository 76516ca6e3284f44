"""JobSpec.backend and attention (helpers/job/rules/resolve.py, builder.py): auto picks Transformer
Engine only on a GPU with TE installed, and the core attention from the backend; an explicit 'te'
that cannot be honoured, and an attention the chosen backend does not build, are refused before
any process starts with the fix in the message. (The TE path itself cannot run on this kit's
machines.)"""
import pytest

from helpers.errors import InvalidJob
from helpers.job import rules
from helpers.job.rules.environment import Environment
from helpers.job.spec import JobSpec
from helpers.launch import runner

GPU_WITH_TE = Environment(cuda_devices=1, te_installed=True)
GPU = Environment(cuda_devices=1)


def test_auto_is_te_only_on_a_gpu_with_te():
    assert rules.resolve(JobSpec(), GPU_WITH_TE).spec.backend == "te"
    assert rules.resolve(JobSpec(), GPU).spec.backend == "local"
    assert rules.resolve(JobSpec(), rules.CPU_ONLY).spec.backend == "local"
    assert rules.resolve(JobSpec(backend="local"), GPU_WITH_TE).spec.backend == "local"


def test_auto_attention_follows_the_backend():
    assert rules.resolve(JobSpec(), GPU_WITH_TE).spec.attention == "transformer_engine"
    assert rules.resolve(JobSpec(), GPU).spec.attention == "sdpa"
    assert rules.resolve(JobSpec(attention="megatron_local"), GPU).spec.attention == "megatron_local"


def names(spec, env):
    return [v.name for v in rules.check(rules.resolve(spec, env), env).violations]


def test_explicit_te_without_te_is_refused_before_start():
    assert names(JobSpec(device="cuda", backend="te"), GPU) == ["te_not_installed"]
    assert names(JobSpec(device="cpu", backend="te"), rules.CPU_ONLY) == ["te_needs_gpu"]
    with pytest.raises(InvalidJob, match="transformer_engine.*not installed.*backend='local'"):
        rules.check(rules.resolve(JobSpec(device="cuda", backend="te"), GPU), GPU).refuse()


@pytest.mark.parametrize("spec, name", [
    (JobSpec(attention="megatron_local", cp=2), "megatron_local_attention_no_cp"),
    (JobSpec(attention="megatron_local", model="deepseek-v2-lite"), "megatron_local_attention_no_mla"),
    (JobSpec(attention="transformer_engine"), "attention_needs_te"),
])
def test_an_attention_the_local_backend_does_not_build_is_refused(spec, name):
    assert name in names(spec, rules.CPU_ONLY)


def test_the_runner_writes_the_decided_backend_and_refuses_unknown_ones():
    assert runner.validate(JobSpec(device="cpu"), rules.CPU_ONLY).backend == "local"
    with pytest.raises(InvalidJob, match="backend must be one of auto, local, te, not 'tensorrt'"):
        runner.validate(JobSpec(device="cpu", backend="tensorrt"), rules.CPU_ONLY)
