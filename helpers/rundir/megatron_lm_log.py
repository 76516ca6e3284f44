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
TensorBoard's `lm loss` scalar is the per-iteration value and needs no correction.

Besides the iteration lines, `read` keeps the memory lines `training_log` prints once the optimizer
state exists (after the first iterations, and around checkpoint saves): "Theoretical memory
footprints: weight and optimizer=.. MB, activation=.. MB, total=.. MB" (rank 0,
megatron/training/theoretical_memory_usage.py `report_theoretical_memory`) and "[Rank R] (after N
iterations) memory (MB) | allocated: .. | max allocated: .. | reserved: .. | max reserved: .."
(megatron/training/utils/common_utils.py `report_memory`). `parse_megatron_log` gives the same
reading in the shape benchmarks/megatron_lm/roundtrip.py records: lists aligned on the iterations
that printed a loss, plus the evaluations and the checkpoint a run loaded."""
from __future__ import annotations

import re

_ITERATION = re.compile(r"\biteration\s+(\d+)/\s*(\d+)\s*\|(.*)")
_FIELD = re.compile(r"\s*([^|:]+?):\s*([-+0-9.eEnaif]+)\s*\|")
_EVAL = re.compile(r"\bvalidation\S* loss at iteration (\d+)( on (?:validation|test) set)? \|(.*)")
_EVAL_LM = re.compile(r"lm loss value:\s*([-+0-9.eE]+)")
_THEORETICAL = re.compile(r"Theoretical memory footprints: weight and optimizer=([\d.]+) MB, "
                          r"activation=([\d.]+) MB, total=([\d.]+) MB")
_MEMORY = re.compile(r"\[Rank (\d+)\] \(([^)]*)\) memory \(MB\)((?:\s*\|\s*[^|:]+:\s*[\d.]+)+)")
_MEMORY_FIELD = re.compile(r"\|\s*([^|:]+?):\s*([\d.]+)")
_AFTER = re.compile(r"after (\d+) iterations")
ITERATION_LINE = re.compile(r"\biteration\s+(\d+)/\s*(\d+)\s*\|(.*)$")
EVAL_LINE = re.compile(r"validation loss at (.+?) \| lm loss value: ([^\s|]+)")
LOADED_LINE = re.compile(r"successfully loaded checkpoint from (\S+).*?at iteration (\d+)")
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
    theoretical, memory = None, []
    for line in text.splitlines():
        if m := _THEORETICAL.search(line):
            theoretical = dict(zip(("weight_and_optimizer", "activation", "total"), map(float, m.groups())))
            continue
        if m := _MEMORY.search(line):
            after = _AFTER.fullmatch(m.group(2))
            memory.append({"rank": int(m.group(1)), "when": m.group(2),
                           "after_iterations": int(after.group(1)) if after else None,
                           **{k.strip().replace(" ", "_"): float(v) for k, v in _MEMORY_FIELD.findall(m.group(3))}})
            continue
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
    return {"iterations": iterations, "evaluations": evaluations, "theoretical_memory_mb": theoretical,
            "memory_mb": memory}


def losses(text: str, log_interval: int = 1) -> list[float]:
    """The training loss of every logged iteration, in order (iteration 2 corrected: see above)."""
    rows = read(text, log_interval)["iterations"]
    return [rows[i]["loss"] for i in sorted(rows) if "loss" in rows[i]]


def _field(rest: str, name: str) -> float | None:
    m = re.search(re.escape(name) + r":\s*([^\s|]+)", rest)
    try:
        return float(m.group(1)) if m else None
    except ValueError:
        return None


def parse_megatron_log(text: str) -> dict:
    """Megatron-LM's training log as lists aligned on the iterations that printed an "lm loss" (a line
    whose loss is NaN prints none: `training_log` prints a loss only when its mean is >= 0; `rows` has
    every line): `losses` (each iteration's own, the second line corrected: module docstring),
    `printed_losses` (as printed), `grad_norms`, `lrs`, `step_ms` (elapsed time per iteration),
    `consumed_samples`, `global_batches`, `loss_scales`, `skipped` and `nan` (the iterations skipped
    and the NaN ones since the previous line); `evals` (every "validation loss at <where> | lm loss
    value: X" line, the test set's "... on test set" too); `loaded` (the "successfully loaded checkpoint
    from DIR ... at iteration I" line); `theoretical_memory_mb` and `memory_mb` (as `read`)."""
    columns = {"grad_norms": "grad norm", "lrs": "learning rate", "step_ms": "elapsed time per iteration (ms)",
               "consumed_samples": "consumed samples", "global_batches": "global batch size",
               "loss_scales": "loss scale", "skipped": "number of skipped iterations",
               "nan": "number of nan iterations"}
    out = {"iterations": [], "losses": [], "printed_losses": [], **{k: [] for k in columns},
           "evals": [], "loaded": None}
    for line in text.splitlines():
        m = ITERATION_LINE.search(line)
        if m and "lm loss:" in m.group(3):
            rest = m.group(3)
            out["iterations"].append(int(m.group(1)))
            out["printed_losses"].append(_field(rest, "lm loss"))
            for key, name in columns.items():
                out[key].append(_field(rest, name))
            continue
        m = EVAL_LINE.search(line)
        if m:
            try:
                out["evals"].append({"at": m.group(1).strip(), "loss": float(m.group(2))})
            except ValueError:
                pass
            continue
        m = LOADED_LINE.search(line)
        if m:
            out["loaded"] = {"from": m.group(1), "iteration": int(m.group(2))}
    whole = read(text)
    out["rows"] = whole["iterations"]
    out["losses"] = [whole["iterations"].get(i, {}).get("loss") for i in out["iterations"]]
    out["theoretical_memory_mb"], out["memory_mb"] = whole["theoretical_memory_mb"], whole["memory_mb"]
    return out
