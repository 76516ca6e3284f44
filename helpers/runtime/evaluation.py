"""Forward-only evaluation, through Megatron's own schedule (every layout, PP included):

* `fixed_batch_loss`: the loss of one fixed synthetic batch, the same for every layout. A
  checkpoint records it when saved; loaded into another layout it must come out the same.
* `Evaluator`: validation and test passes on real data. Validation uses the same eval_iters global
  batches of the valid split every time, so its curve is comparable across the run; test runs
  once, after the last iteration. Rank 0 appends one line per pass to `validation.jsonl`:
  {"split", "iteration", "loss", "batches"}."""
from __future__ import annotations

from pathlib import Path

from helpers.rundir import names
from helpers.rundir.writer import append_jsonl
from helpers.runtime import synthetic
from helpers.runtime.step import forward_only_loss

# A sample range no training run reaches in the kit's tests and lessons: the evaluation batch is
# the synthetic source's "iteration" EVAL_INDEX, fixed by the seed alone.
EVAL_INDEX = 1_000_000


def fixed_batch_loss(model: list, spec, device, vocab_size: int, dp_rank: int) -> float:
    """Global-batch mean loss of the fixed evaluation batch (collective: every rank calls)."""
    data = [iter(synthetic.microbatches(spec.seed, EVAL_INDEX, spec.global_batch_size, spec.micro_batch,
                                        spec.dp, dp_rank, spec.seq_len, vocab_size))
            for _ in model]
    return forward_only_loss(model, data, spec, device)


class Evaluator:
    def __init__(self, run_dir: Path, spec, splits: dict, model: list, device, dp_rank: int, rank: int):
        self.spec, self.splits, self.model, self.device = spec, splits, model, device
        self.dp_rank = dp_rank
        self.path = Path(run_dir) / names.VALIDATION
        self.rank = rank
        self.records: list[dict] = []

    def _pass(self, split: str, iteration: int) -> float:
        from helpers.runtime import (
            data,  # Megatron's dataset code: only jobs on real data load it
        )

        spec, model = self.spec, self.model
        losses = []
        for j in range(spec.eval_iters):
            its = [iter(data.microbatches(self.splits[split], j, spec, self.dp_rank)) for _ in model]
            losses.append(forward_only_loss(model, its, spec, self.device))
        record = {"split": split, "iteration": iteration, "loss": sum(losses) / len(losses),
                  "batches": spec.eval_iters}
        self.records.append(record)
        if self.rank == 0:
            append_jsonl(self.path, record)
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
