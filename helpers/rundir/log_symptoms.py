"""What goes wrong in a Megatron-LM run, read from its log (helpers/rundir/megatron_lm_log.py `read`):
the real logs the kit keeps under data/megatron_lm_logs/ (`LOGS`: each file and the symptom it was
captured to show), their letters in lesson 19's diagnose exercise, and the line that gives each
symptom away.

`give_away` looks for the four symptoms in the order they stop a run from learning: a NaN (Megatron
counts it: "number of nan iterations", and its line prints no loss; with its default
--check-for-nan-in-loss-and-grad its result validation logs "Unexpected result nan ..." and stops the
run before the iteration's line is printed), an iteration the fp16 loss
scaler skipped ("number of skipped iterations", the loss scale halved), a loss spike (a loss well
above the ones just before it), a throughput drop (the time per iteration well above its steady
value). Thresholds: a spike is a loss SPIKE times the median of the previous SPIKE_WINDOW losses;
a drop is SLOW_RUN or more iterations in a row, each SLOW times the steady time per iteration (the
lower quartile of the iterations after the warm-up: the first WARMUP lines are start-up, allocator and
kernel selection), that no checkpoint save explains: after its save at iteration 10 the healthy log's
iterations take up to 1.7 times the steady time (the save's background work) to the end of the run,
while the throughput-drop log's neighbour on the GPU slows iterations 14-21 by up to 1.5 times and
then leaves. With the NaN check off, Megatron-LM prints a NaN iteration's grad norm as nan and no lm
loss ("number of nan iterations" stays 0): a grad norm that is not finite is a NaN too."""
from __future__ import annotations

import math
import random
import re
import statistics
from pathlib import Path

from helpers.job.paths import REPO_ROOT
from helpers.rundir import megatron_lm_log

LOG_DIR = REPO_ROOT / "data" / "megatron_lm_logs"
HEALTHY = "healthy.log"
LOGS = {"loss_spike.log": "loss spike", "skipped_iterations.log": "skipped iterations", "nan.log": "NaN",
        "throughput_drop.log": "throughput drop"}  # the diagnose exercise's logs and what each shows
SYMPTOMS = tuple(LOGS.values())
SEED = 19  # the letters' order: fixed, so an answer written once stays right
SPIKE, SPIKE_WINDOW = 1.5, 5
SLOW, SLOW_RUN, WARMUP = 1.3, 5, 2
_SAVED = re.compile(r"saving checkpoint at iteration\s+(\d+)")
_REJECTED = re.compile(r"Unexpected result (nan|-?inf)\b.*?iteration #?(\d+)", re.IGNORECASE)


def letters(seed: int = SEED) -> dict[str, str]:
    """{letter: log file name}: the four logs in an order shuffled with `seed`, lettered A-D, whether
    or not each file is there yet (a letter keeps its log)."""
    names = sorted(LOGS)
    random.Random(seed).shuffle(names)
    return dict(zip("ABCD", names))


def present(log_dir: Path | None = None) -> dict[str, Path]:
    """{letter: path} of the lettered logs that `log_dir` (default data/megatron_lm_logs/) holds."""
    folder = Path(log_dir) if log_dir is not None else LOG_DIR
    return {k: folder / name for k, name in letters().items() if (folder / name).is_file()}


def _loss(row: dict) -> float | None:
    return row.get("loss")


def give_away(text: str) -> tuple[str, int, str] | None:
    """(symptom, iteration, why) for the first symptom found in a Megatron-LM log's text, in the order
    of the module docstring; None for a log that shows none."""
    rows = megatron_lm_log.read(text)["iterations"]
    for line in text.splitlines():
        if m := _REJECTED.search(line):
            return "NaN", int(m.group(2)), line.strip()
    order = sorted(rows)
    for i in order:
        nan = rows[i].get("nan", 0) or 0
        loss, norm = _loss(rows[i]), rows[i].get("grad_norm")
        if nan > 0 or (loss is not None and not math.isfinite(loss)):
            return "NaN", i, f"iteration {i}: number of nan iterations: {nan:.0f}" + (
                "" if loss is not None else " and no lm loss printed")
        if norm is not None and not math.isfinite(norm):  # without the check Megatron-LM prints no lm loss then
            return "NaN", i, f"iteration {i}: grad norm {norm}" + ("" if loss is not None else ", no lm loss printed")
    for i in order:
        if (rows[i].get("skipped", 0) or 0) > 0:
            scale = rows[i].get("loss_scale")
            return "skipped iterations", i, (f"iteration {i}: number of skipped iterations: {rows[i]['skipped']:.0f}"
                                             + (f", loss scale {scale:g}" if scale is not None else ""))
    losses = [(i, _loss(rows[i])) for i in order if _loss(rows[i]) is not None]
    for k in range(SPIKE_WINDOW, len(losses)):
        i, loss = losses[k]
        before = statistics.median(v for _, v in losses[k - SPIKE_WINDOW:k])
        if loss > SPIKE * before:
            return "loss spike", i, f"iteration {i}: lm loss {loss:.3f}, {loss / before:.1f}x the median {before:.3f} " \
                                    f"of the {SPIKE_WINDOW} before"
    times = [(i, rows[i]["step_ms"]) for i in order[WARMUP:] if rows[i].get("step_ms") is not None]
    if times:
        # the undisturbed pace: the lower quartile (a slow stretch or a save's aftermath lies above it)
        steady = statistics.quantiles([v for _, v in times], n=4)[0] if len(times) >= 4 else min(v for _, v in times)
        saved = {int(m.group(1)) for m in _SAVED.finditer(text)}
        run: list[tuple[int, float]] = []
        for i, ms in times + [(None, 0.0)]:
            if i is not None and ms > SLOW * steady:
                run.append((i, ms))
                continue
            if len(run) >= SLOW_RUN and run[0][0] - 1 not in saved:  # slow from a save on: the save's own work
                first, worst = run[0][0], max(v for _, v in run)
                return "throughput drop", first, (f"iterations {first}-{run[-1][0]}: up to {worst:.1f} ms per "
                                                  f"iteration, {worst / steady:.1f}x the steady {steady:.1f} ms, "
                                                  f"with no checkpoint save before them")
            run = []
    return None
