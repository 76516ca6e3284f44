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


# Real lines of Megatron-LM's pretrain_gpt.py on an H100 (data/megatron_lm_logs/healthy.log), as printed
REAL = """\
 [2026-12-06 16:41:49.601900] iteration        1/      20 | consumed samples:           16 | elapsed time per iteration (ms): 1687.3 | learning rate: 3.000000E-04 | global batch size:    16 | lm loss: 6.247449E+00 | loss scale: 1.0 | grad norm: 14.307 | number of skipped iterations:   0 | number of nan iterations:   0 |
Theoretical memory footprints: weight and optimizer=31.58 MB, activation=37.55 MB, total=69.12 MB

[Rank 0] (after 1 iterations) memory (MB) | allocated: 97.64 | max allocated: 139.43 | reserved: 178.00 | max reserved: 178.00
 [2026-12-06 16:41:49.700954] iteration        2/      20 | consumed samples:           32 | elapsed time per iteration (ms): 893.1 | learning rate: 3.000000E-04 | global batch size:    16 | lm loss: 5.881635E+00 | loss scale: 1.0 | grad norm: 7.494 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2026-12-06 16:41:49.776317] iteration        3/      20 | consumed samples:           48 | elapsed time per iteration (ms): 75.3 | learning rate: 3.000000E-04 | global batch size:    16 | lm loss: 5.150181E+00 | loss scale: 1.0 | grad norm: 4.834 | number of skipped iterations:   0 | number of nan iterations:   0 |
[Rank 0] (before save_checkpoint for iteration 10) memory (MB) | allocated: 97.64 | max allocated: 153.46 | reserved: 130.00 | max reserved: 192.00
 validation loss at iteration 20 on test set | lm loss value: 3.381055E+00 | lm loss PPL: 2.940177E+01 | 
"""


def test_every_field_of_real_iteration_and_memory_lines():
    got = megatron_lm_log.parse_megatron_log(REAL)
    assert got["iterations"] == [1, 2, 3]
    assert got["printed_losses"] == [6.247449, 5.881635, 5.150181]
    assert abs(got["losses"][1] - (2 * 5.881635 - 6.247449)) < 1e-12 and got["losses"][2] == 5.150181
    assert got["consumed_samples"] == [16, 32, 48] and got["global_batches"] == [16, 16, 16]
    assert got["step_ms"] == [1687.3, 893.1, 75.3] and got["lrs"] == [3e-4] * 3
    assert got["grad_norms"] == [14.307, 7.494, 4.834] and got["loss_scales"] == [1.0] * 3
    assert got["skipped"] == [0, 0, 0] and got["nan"] == [0, 0, 0]
    assert got["theoretical_memory_mb"] == {"weight_and_optimizer": 31.58, "activation": 37.55, "total": 69.12}
    assert got["memory_mb"] == [
        {"rank": 0, "when": "after 1 iterations", "after_iterations": 1, "allocated": 97.64, "max_allocated": 139.43,
         "reserved": 178.0, "max_reserved": 178.0},
        {"rank": 0, "when": "before save_checkpoint for iteration 10", "after_iterations": None, "allocated": 97.64,
         "max_allocated": 153.46, "reserved": 130.0, "max_reserved": 192.0}]
    assert got["evals"] == [{"at": "iteration 20 on test set", "loss": 3.381055}] and got["loaded"] is None
    assert got["rows"][3] == {"consumed_samples": 48, "step_ms": 75.3, "lr": 3e-4, "global_batch": 16, "loss": 5.150181,
                              "loss_scale": 1.0, "grad_norm": 4.834, "skipped": 0, "nan": 0}


def test_a_nan_line_prints_no_loss_and_is_kept_in_rows_only():
    """training_log prints a loss only when its mean is >= 0: a NaN iteration's line has none."""
    line = (" iteration        5/      20 | consumed samples:           80 | elapsed time per iteration (ms): 75.0 | "
            "learning rate: 3.000000E-04 | global batch size:    16 | loss scale: 1.0 | grad norm: nan | "
            "number of skipped iterations:   0 | number of nan iterations:   1 |")
    got = megatron_lm_log.parse_megatron_log(line)
    assert got["iterations"] == [] and got["rows"][5]["nan"] == 1 and "loss" not in got["rows"][5]


def test_the_committed_healthy_log_reads_whole():
    from helpers.rundir.log_symptoms import HEALTHY, LOG_DIR

    got = megatron_lm_log.parse_megatron_log((LOG_DIR / HEALTHY).read_text())
    assert got["iterations"] == list(range(1, 21)) and got["consumed_samples"] == [16 * i for i in range(1, 21)]
    assert got["printed_losses"][-1] == 3.51235 and got["step_ms"][:2] == [1687.3, 893.1]
    assert [e["at"] for e in got["evals"]] == ["iteration 20", "iteration 20 on validation set", "iteration 20 on test set"]
