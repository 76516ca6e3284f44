"""Megatron-LM's own log, read: the lines `pretrain_gpt.py` prints (megatron/training/training.py,
`training_log` and `evaluate_and_print_results`) as numbers per iteration, to set beside a kit run's
metrics.jsonl.

    read(text, log_interval=1) -> {"iterations": {i: {"loss": .., "lr": .., "grad_norm": .., ...}},
                                   "evaluations": [{"split", "iteration", "after_training", "loss"}, ...]}

Megatron-LM's printed `lm loss` is the mean over the iterations accumulated since its last reset.
`training_log` always prints a run's first iteration (to show the start-up's cost,
`is_first_iteration`; a resumed run's first iteration too) but does not reset after it, so the next
printed line covers every iteration since the run started: with `--log-interval 1` the second line
prints (loss 1 + loss 2) / 2, not its own iteration's loss, and every later line is its own
iteration's. `read` undoes that: the second line's own loss is 2 x printed - the first line's. With a larger interval every line after the first is its interval's mean
(iterations 1..interval for the second), the kit's metrics.jsonl the logged iteration's own loss.
TensorBoard's `lm loss` scalar is the per-iteration value and needs no correction."""
from __future__ import annotations

import re

_ITERATION = re.compile(r"\biteration\s+(\d+)/\s*(\d+)\s*\|(.*)")
_FIELD = re.compile(r"\s*([^|:]+?):\s*([-+0-9.eEnaif]+)\s*\|")
_EVAL = re.compile(r"\bvalidation\S* loss at iteration (\d+)( on (?:validation|test) set)? \|(.*)")
_EVAL_LM = re.compile(r"lm loss value:\s*([-+0-9.eE]+)")
NAMES = {"lm loss": "loss", "learning rate": "lr", "grad norm": "grad_norm", "loss scale": "loss_scale",
         "consumed samples": "consumed_samples", "elapsed time per iteration (ms)": "step_ms",
         "throughput per GPU (TFLOP/s/GPU)": "tflops_per_gpu", "global batch size": "global_batch",
         "number of skipped iterations": "skipped", "number of nan iterations": "nan"}


def _number(text: str) -> float:
    return float(text)


def read(text: str, log_interval: int = 1) -> dict:
    """Every training line and every validation/test line of one run's Megatron-LM log (module
    docstring). An evaluation inside the training loop reads the validation set from where the
    previous one stopped; the ones after training ("on validation set", "on test set") follow it."""
    iterations: dict[int, dict] = {}
    evaluations: list[dict] = []
    for line in text.splitlines():
        if (m := _EVAL.search(line)) and (lm := _EVAL_LM.search(m.group(3))):
            where = m.group(2) or ""
            evaluations.append({"split": "test" if "test" in where else "validation", "iteration": int(m.group(1)),
                                "after_training": bool(where), "loss": _number(lm.group(1))})
            continue
        if m := _ITERATION.search(line):
            row = {}
            for name, value in _FIELD.findall(m.group(3) + "|"):
                if name.strip() in NAMES:
                    try:
                        row[NAMES[name.strip()]] = _number(value)
                    except ValueError:
                        continue
            iterations[int(m.group(1))] = row
    logged = [i for i in sorted(iterations) if "loss" in iterations[i]]
    if log_interval == 1 and len(logged) >= 2 and logged[1] == logged[0] + 1:
        first, second = logged[:2]
        printed = iterations[second]["loss"]
        iterations[second] = {**iterations[second], "loss": 2 * printed - iterations[first]["loss"],
                              "printed_loss": printed}
    return {"iterations": iterations, "evaluations": evaluations}


def losses(text: str, log_interval: int = 1) -> list[float]:
    """The training loss of every logged iteration, in order (iteration 2 corrected: see above)."""
    rows = read(text, log_interval)["iterations"]
    return [rows[i]["loss"] for i in sorted(rows) if "loss" in rows[i]]
