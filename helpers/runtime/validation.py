"""Validation and test passes on real data: forward only, through Megatron's own schedule
(`get_forward_backward_func()(..., forward_only=True)`), every layout included (PP too).
Validation uses the same eval_iters global batches of the valid split every time, so its curve is
comparable across the run; test runs once, after the last iteration. Rank 0 appends one line per
pass to `validation.jsonl`: {"split", "iteration", "loss", "batches"}."""
from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import torch


class Evaluator:
    def __init__(self, run_dir: Path, spec, splits: dict, model: list, device, dp_rank: int,
                 forward_step, global_loss, rank: int):
        self.spec, self.splits, self.model, self.device = spec, splits, model, device
        self.dp_rank, self.forward_step, self.global_loss = dp_rank, forward_step, global_loss
        self.path = Path(run_dir) / "validation.jsonl"
        self.rank = rank
        self.records: list[dict] = []

    def _pass(self, split: str, iteration: int) -> float:
        from helpers.runtime import data
        from helpers.runtime.schedule import run_schedule

        spec, model = self.spec, self.model
        losses = []
        for m in model:
            m.eval()
        with torch.no_grad():
            for j in range(spec.eval_iters):
                its = [iter(data.microbatches(self.splits[split], j, spec, self.dp_rank)) for _ in model]
                out = run_schedule(model, its, spec, partial(self.forward_step, self.device, 1.0),
                                   forward_only=True)
                losses.append(self.global_loss(out, spec, self.device))
        for m in model:
            m.train()
        record = {"split": split, "iteration": iteration, "loss": sum(losses) / len(losses),
                  "batches": spec.eval_iters}
        self.records.append(record)
        if self.rank == 0:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")
        return record["loss"]

    def after_step(self, iteration: int) -> None:
        """Validation every eval_interval iterations, and after the last (collective)."""
        k = self.spec.eval_interval
        if (k and iteration % k == 0) or iteration == self.spec.iters:
            self._pass("valid", iteration)

    def before_training(self, start: int = 0) -> None:
        """Validation loss of the starting weights: the baseline the run improves on."""
        self._pass("valid", start)

    def test(self) -> None:
        self._pass("test", self.spec.iters)
