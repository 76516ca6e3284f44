"""Megatron-LM's printed log read back as per-iteration numbers (helpers/rundir/megatron_lm_log.py),
against Megatron-LM's own `training_log` (megatron/training/training.py of the megatron-core wheel)
fed known losses on CPU: with --log-interval 1 its line for iteration 2 prints the mean of
iterations 1 and 2 (it does not reset after the first iteration), which read back as iteration 2's
loss looks like a different run. The reader must return each iteration's own loss."""
import json
import textwrap

from helpers.rundir import megatron_lm_log

LOSSES = [6.24058, 5.32282, 4.8, 8.0165, 7.5]  # the kit's per-iteration losses of a 4-layer GPT on WikiText

TRAINING_LOG = """
import contextlib, io, json, os, sys
from unittest import mock
import torch
from megatron.training import arguments, global_vars, training
from megatron.core.num_microbatches_calculator import init_num_microbatches_calculator, destroy_num_microbatches_calculator

os.environ.update(WORLD_SIZE="1", RANK="0", LOCAL_RANK="0", CUDA_DEVICE_MAX_CONNECTIONS="1")
argv = ["pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "4",
        "--seq-length", "256", "--max-position-embeddings", "256", "--micro-batch-size", "4",
        "--global-batch-size", "16", "--train-iters", "5", "--lr", "1e-3", "--log-interval", "LOG_INTERVAL",
        "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "511"]
with mock.patch.object(sys, "argv", argv), mock.patch.object(arguments, "get_device_arch_version", return_value=9), \\
        mock.patch.object(torch.cuda, "get_device_capability", return_value=(9, 0)), \\
        contextlib.redirect_stdout(io.StringIO()):
    args = arguments.parse_args()
    arguments.validate_args(args)
args.padded_vocab_size = 512
global_vars.set_args(args)
global_vars._GLOBAL_TIMERS = None  # a fresh interval timer for each log (the child runs several scripts)
global_vars._set_timers(args)
destroy_num_microbatches_calculator()
init_num_microbatches_calculator(0, None, args.global_batch_size, args.micro_batch_size, 1)
training.get_timers()("interval-time", log_level=0).start(barrier=False)
printed, total = io.StringIO(), {}
with mock.patch.object(training, "reduce_max_stat_across_model_parallel_group", lambda stat, group=None: stat), \\
        mock.patch.object(training, "get_energy_monitor", lambda: None), contextlib.redirect_stdout(printed):
    for i, loss in enumerate(LOSSES, start=1):
        args.consumed_train_samples = i * args.global_batch_size
        training.training_log({"lm loss": torch.tensor(loss)}, total, 1e-3, i, 1.0, False, 0, 1.0, None, None, 0,
                              is_first_iteration=i == 1)
destroy_num_microbatches_calculator()
print(json.dumps(printed.getvalue()))
"""


def megatron_lm_printed(megatron_cpu, log_interval: int) -> str:
    script = TRAINING_LOG.replace("LOG_INTERVAL", str(log_interval)).replace("LOSSES", repr(LOSSES))
    return json.loads(megatron_cpu(textwrap.dedent(script)).strip().splitlines()[-1])


def test_iteration_two_is_read_as_its_own_loss(megatron_cpu):
    text = megatron_lm_printed(megatron_cpu, 1)
    rows = megatron_lm_log.read(text)["iterations"]
    assert sorted(rows) == [1, 2, 3, 4, 5]
    # what Megatron-LM printed for iteration 2: the mean of the first two (6 significant digits printed)
    assert abs(rows[2]["printed_loss"] - (LOSSES[0] + LOSSES[1]) / 2) < 1e-5
    assert all(abs(a - b) < 2e-5 for a, b in zip(megatron_lm_log.losses(text), LOSSES)), megatron_lm_log.losses(text)
    assert rows[3]["lr"] == 1e-3 and rows[3]["global_batch"] == 16 and rows[3]["skipped"] == 0


def test_a_longer_interval_prints_interval_means(megatron_cpu):
    text = megatron_lm_printed(megatron_cpu, 2)
    got = megatron_lm_log.losses(text, log_interval=2)  # iteration 1 alone, then the means of 1-2 and 3-4
    want = (LOSSES[0], sum(LOSSES[:2]) / 2, sum(LOSSES[2:4]) / 2)
    assert len(got) == 3 and all(abs(a - b) < 2e-5 for a, b in zip(got, want)), got  # printed with 7 digits


def test_a_resumed_runs_second_line_is_corrected_too():
    """A resumed run's first iteration is its `is_first_iteration`: its second line averages two."""
    line = " iteration {:8d}/      20 | consumed samples:          176 | lm loss: {:.6E} | grad norm: 1.000 |"
    text = "\n".join(line.format(i, x) for i, x in [(11, 3.0), (12, 2.5), (13, 1.5)])
    assert megatron_lm_log.losses(text) == [3.0, 2.0, 1.5]


def test_validation_and_test_lines():
    text = (" validation loss at iteration 20 | lm loss value: 2.720379E+00 | lm loss PPL: 1.518E+01 | \n"
            " validation loss at iteration 20 on validation set | lm loss value: 2.8E+00 | lm loss PPL: 16.4 |\n"
            " validation loss at iteration 20 on test set | lm loss value: 2.721240E+00 | lm loss PPL: 1.52E+01 | ")
    got = megatron_lm_log.read(text)["evaluations"]
    assert got == [{"split": "validation", "iteration": 20, "after_training": False, "loss": 2.720379},
                   {"split": "validation", "iteration": 20, "after_training": True, "loss": 2.8},
                   {"split": "test", "iteration": 20, "after_training": True, "loss": 2.72124}]
