"""The optimizer and data-parallel overlap settings (JobSpec.weight_decay, adam_*, overlap_*,
ddp_bucket_size): each auto decided as the docs say, every value Megatron or torch would refuse
inside the worker a named rule before start, the command line's flags, and the values reaching
Megatron's configs and Megatron-LM's flags as set."""
import pytest

from helpers.job import rules
from helpers.job.rules.environment import Environment
from helpers.job.spec import JobSpec
from helpers.launch.cli import parser, spec_from_args

GPUS = Environment(cuda_devices=8)


def resolved(env=rules.CPU_ONLY, **fields) -> JobSpec:
    return rules.resolve(JobSpec(**fields), env).spec


def names(env=rules.CPU_ONLY, **fields) -> list[str]:
    return [v.name for v in rules.check(rules.resolve(JobSpec(**fields), env), env).violations]


def test_megatron_defaults():
    spec = JobSpec()
    assert (spec.weight_decay, spec.adam_beta1, spec.adam_beta2, spec.adam_eps) == (0.01, 0.9, 0.999, 1e-8)
    from megatron.core.optimizer import OptimizerConfig
    megatron = OptimizerConfig()
    assert (megatron.weight_decay, megatron.adam_beta1, megatron.adam_beta2, megatron.adam_eps) == (
        spec.weight_decay, spec.adam_beta1, spec.adam_beta2, spec.adam_eps)


@pytest.mark.parametrize("env, fields, grads, params", [
    (GPUS, dict(nproc=2, dist_opt=True), "on", "on"),  # a GPU job with DP=2: both, where Megatron allows them
    (GPUS, dict(nproc=2), "on", "off"),  # no distributed optimizer: no parameter all-gather to overlap
    (GPUS, dict(nproc=2, cp=2, dist_opt=True), "on", "on"),  # DP=1 but the gradients are reduced over CP=2
    (GPUS, dict(nproc=2, tp=2, dist_opt=True), "off", "off"),  # one replica: nothing to reduce
    (GPUS, dict(nproc=2, overlap_grad_reduce="off", dist_opt=True), "off", "off"),  # auto follows an explicit off
    (rules.CPU_ONLY, dict(nproc=2, dist_opt=True), "off", "off"),  # CPU: off unless asked for
    (rules.CPU_ONLY, dict(nproc=2, dist_opt=True, overlap_grad_reduce="on"), "on", "off"),
])
def test_overlap_autos(env, fields, grads, params):
    spec = resolved(env, **fields)
    assert (spec.overlap_grad_reduce, spec.overlap_param_gather) == (grads, params)


# Every rule the optimizer fields add, each with a job that breaks only it.
BROKEN = {
    "adam_beta1_range": dict(adam_beta1=1.0),
    "adam_beta2_range": dict(adam_beta2=-0.1),
    "adam_eps_positive": dict(adam_eps=0.0),
    "weight_decay_not_negative": dict(weight_decay=-0.01),
    "overlap_param_gather_needs_dist_opt": dict(nproc=2, overlap_grad_reduce="on", overlap_param_gather="on"),
    "overlap_param_gather_needs_overlap_grad_reduce": dict(nproc=2, dist_opt=True, overlap_grad_reduce="off",
                                                           overlap_param_gather="on"),
    "ddp_bucket_size_positive": dict(nproc=2, overlap_grad_reduce="on", ddp_bucket_size=0),
    "ddp_bucket_size_without_overlap": dict(nproc=2, ddp_bucket_size=10_000),
}


@pytest.mark.parametrize("rule", BROKEN)
def test_each_rule_fires_and_names_itself(rule):
    found = rules.check(rules.resolve(JobSpec(**BROKEN[rule]), rules.CPU_ONLY), rules.CPU_ONLY).violations
    assert [v.name for v in found] == [rule]
    assert found[0].category == "optimizer" and found[0].fix and rule in str(found[0])


def test_nan_is_refused_too():
    assert set(names(adam_beta1=float("nan"), adam_eps=float("nan"), weight_decay=float("nan"))) == {
        "adam_beta1_range", "adam_eps_positive", "weight_decay_not_negative"}


def test_overlap_on_cpu_is_allowed():
    """Megatron's DDP overlap runs on gloo (tests/jobs/test_optimizer.py trains with it): no rule refuses it."""
    assert names(nproc=2, dist_opt=True, overlap_grad_reduce="on", overlap_param_gather="on",
                 ddp_bucket_size=5_000) == []
    assert names(GPUS, nproc=2, dist_opt=True) == []  # the GPU autos pass their own rules


def test_command_line_flags():
    args = parser().parse_args(["--weight-decay", "0.1", "--adam-beta1", "0.8", "--adam-beta2", "0.95",
                                "--adam-eps", "1e-6", "--overlap-grad-reduce", "on", "--overlap-param-gather", "off",
                                "--ddp-bucket-size", "5000"])
    spec = spec_from_args(args)
    assert (spec.weight_decay, spec.adam_beta1, spec.adam_beta2, spec.adam_eps) == (0.1, 0.8, 0.95, 1e-6)
    assert (spec.overlap_grad_reduce, spec.overlap_param_gather, spec.ddp_bucket_size) == ("on", "off", 5000)
    with pytest.raises(SystemExit):
        parser().parse_args(["--overlap-grad-reduce", "yes"])


def test_configs_and_megatron_lm_flags_carry_the_values():
    """The worker's DistributedDataParallelConfig and OptimizerConfig (helpers/runtime/build.py), recorded
    as megatron.json records them, become Megatron-LM flags that its own parser reads back."""
    from megatron.core.transformer import TransformerConfig

    from helpers.rundir import megatron_flags
    from helpers.runtime import build
    from helpers.runtime.measure import megatron_calls

    spec = resolved(nproc=4, pp=2, vpp=2, dist_opt=True, weight_decay=0.1, adam_beta1=0.8, adam_beta2=0.95,
                    adam_eps=1e-6, overlap_grad_reduce="on", overlap_param_gather="on", ddp_bucket_size=5000)
    config = TransformerConfig(num_layers=4, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True)
    ddp, opt = build.ddp_config(spec), build.optimizer_config(config, spec)
    assert (ddp.overlap_grad_reduce, ddp.overlap_param_gather, ddp.align_param_gather, ddp.bucket_size) == (
        True, True, True, 5000)  # aligned all-gathers under the interleaved schedule, as Megatron-LM sets them
    record = {"initialize_model_parallel": {}, "TransformerConfig": {"fields": {}}, "model": [],
              "DistributedDataParallelConfig": megatron_calls.non_defaults(ddp),
              "OptimizerConfig": megatron_calls.non_defaults(opt)}
    assert {k: record["OptimizerConfig"][k] for k in ("weight_decay", "adam_beta1", "adam_beta2", "adam_eps")} == {
        "weight_decay": 0.1, "adam_beta1": 0.8, "adam_beta2": 0.95, "adam_eps": 1e-6}
    flags = megatron_flags.flags(record)
    for flag in ("--weight-decay 0.1", "--adam-beta1 0.8", "--adam-beta2 0.95", "--adam-eps 1e-06",
                 "--overlap-grad-reduce", "--overlap-param-gather", "--ddp-bucket-size 5000"):
        assert flag in flags, (flag, flags)
    args = megatron_flags.parse(flags)
    assert (args.weight_decay, args.adam_beta1, args.adam_beta2, args.adam_eps) == (0.1, 0.8, 0.95, 1e-6)
    assert args.overlap_grad_reduce and args.overlap_param_gather and args.align_param_gather
    assert args.ddp_bucket_size == 5000 and args.use_distributed_optimizer

    plain = resolved(nproc=2)  # the defaults: Megatron's own values, so no flag is needed for them
    plain_flags = megatron_flags.flags({**record, "OptimizerConfig": megatron_calls.non_defaults(
        build.optimizer_config(config, plain)), "DistributedDataParallelConfig": megatron_calls.non_defaults(
        build.ddp_config(plain))})
    assert not any(f.split()[0] in ("--weight-decay", "--adam-beta1", "--adam-beta2", "--adam-eps",
                                    "--overlap-grad-reduce", "--overlap-param-gather") for f in plain_flags)
    assert build.ddp_config(resolved(GPUS, nproc=8, cp=2)).bucket_size == 40_000_000  # Megatron-LM's max(40M, 1M x 8)
    assert build.ddp_config(resolved(GPUS, nproc=64)).bucket_size == 64_000_000


def test_planned_buffers_follow_megatron_buckets():
    """With overlap the planner lays out the gradient buffer in buckets as Megatron's DDP does
    (each padded for the distributed optimizer), so its static bytes stay exact."""
    from helpers.memory.static import Param, _buffer_numel
    from helpers.views.dp_buckets import bucket_layout

    sizes = [1, 7, 64, 100, 513, 4096, 10_000, 33_333] * 3
    params = [(f"p{i}", n) for i, n in enumerate(sizes)]
    for dp in (1, 2, 3, 8):
        for bucket_size in (None, 100, 5_000, 20_000):
            for dist_opt in (True, False):
                megatron = bucket_layout(params, dp, bucket_size, dist_opt=dist_opt)
                assert _buffer_numel([Param(n, k) for n, k in params], dp, dist_opt, bucket_size) == \
                    megatron[-1]["end"], (dp, bucket_size, dist_opt)
