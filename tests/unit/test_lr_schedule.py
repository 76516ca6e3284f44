"""The learning-rate schedule fields (lr_warmup_iters, lr_decay, lr_decay_iters, min_lr): refused
before start when Megatron's OptimizerParamScheduler would assert deep inside a worker, reachable
from the command line, and recorded in the spec. The curve a job trains with, and that a resumed
job continues it, are checked on real jobs in tests/jobs/test_checkpoint.py."""
import pytest

from helpers.errors import InvalidJob
from helpers.job.spec import JobSpec
from helpers.launch import cli, runner


@pytest.mark.parametrize("fields, match", [
    (dict(lr_decay="exponential"), r"lr_decay must be one of constant, linear, cosine, not 'exponential'"),
    (dict(lr_warmup_iters=-1), r"lr_warmup_iters must be >= 0, not -1"),
    (dict(min_lr=0.1, lr=0.01), r"0 <= min_lr <= lr, not min_lr=0.1, lr=0.01"),
    (dict(iters=10, lr_warmup_iters=10), r"lr_warmup_iters=10 must end before iters=10"),
    (dict(iters=10, lr_warmup_iters=20, lr_decay_iters=20, lr_decay="cosine"),
     r"lr_warmup_iters=20 must end before lr_decay_iters=20"),
    # any field with choices
    (dict(attention="flash"), r"attention must be one of auto, sdpa, megatron_local, transformer_engine, not 'flash'"),
])
def test_a_schedule_megatron_would_refuse_is_one_clear_error(fields, match):
    with pytest.raises(InvalidJob, match=match):
        runner.validate(JobSpec(device="cpu", **fields))


def test_valid_schedules_pass_and_the_cli_sets_every_field():
    for fields in (dict(), dict(iters=10, lr_warmup_iters=9), dict(iters=4, lr_decay="cosine", lr_decay_iters=100),
                   dict(iters=0, lr_warmup_iters=5), dict(iters=10, lr_decay="linear", min_lr=3e-3, lr=3e-3)):
        runner.validate(JobSpec(device="cpu", **fields))
    args = cli.parser().parse_args(["--lr", "1e-3", "--lr-warmup-iters", "20", "--lr-decay", "cosine",
                                    "--lr-decay-iters", "200", "--min-lr", "1e-5"])
    spec = cli.spec_from_args(args)
    assert (spec.lr, spec.lr_warmup_iters, spec.lr_decay, spec.lr_decay_iters, spec.min_lr) == (1e-3, 20, "cosine",
                                                                                               200, 1e-5)
    with pytest.raises(SystemExit):  # argparse's own refusal of an unknown style
        cli.parser().parse_args(["--lr-decay", "exponential"])
