"""Forward-only evaluation through Megatron's own schedule (every layout, PP included):

* `fixed_batch_loss`: the loss of one fixed synthetic batch, the same for every layout. A
  checkpoint records it when saved; loaded into another layout it must come out the same.
* `Validation`: validation and test passes on real data (nothing on synthetic data). Validation
  uses the same eval_iters global batches of the valid split every time, so its curve is
  comparable across the run; it runs before training, every eval_interval iterations and after
  the last; test runs once, at the end. Rank 0 appends one line per pass to `validation.jsonl`:
  {"split", "iteration", "loss", "batches"}."""
from __future__ import annotations

from typing import TYPE_CHECKING

from helpers.rundir import names
from helpers.rundir.writer import append_jsonl
from helpers.runtime.data import batches, synthetic
from helpers.runtime.step import forward_only_loss

if TYPE_CHECKING:
    from helpers.runtime.worker import Rank, Trainee

# A sample range no training run reaches in the kit's tests and lessons: the evaluation batch is
# the synthetic source's "iteration" EVAL_INDEX, fixed by the seed alone.
EVAL_INDEX = 1_000_000


def fixed_batch_loss(rank: Rank, trainee: Trainee) -> float:
    """Global-batch mean loss of the fixed evaluation batch (collective: every rank calls)."""
    spec = rank.spec
    data = [iter(synthetic.microbatches(spec.seed, EVAL_INDEX, spec.global_batch_size, spec.micro_batch,
                                        spec.dp, rank.dp_rank, spec.seq_len, trainee.model_desc.vocab_size))
            for _ in trainee.model]
    return forward_only_loss(trainee.model, data, spec, rank.device)


class Validation:
    """`splits`: the job's Megatron datasets by split (None: synthetic data, nothing to validate)."""

    def __init__(self, rank: Rank, trainee: Trainee, splits: dict | None):
        self.rank, self.trainee, self.splits = rank, trainee, splits
        self.records: list[dict] = []

    def run(self, split: str, iteration: int) -> float | None:
        """One pass over `split` (collective); None without real data."""
        rank, trainee, spec = self.rank, self.trainee, self.rank.spec
        if self.splits is None:
            return None
        trainee.param_gather.now()  # overlap_param_gather: every replica's weights updated before they are read
        losses = [forward_only_loss(trainee.model, batches.for_chunks(rank, trainee, self.splits, split, j), spec,
                                    rank.device)
                  for j in range(spec.eval_iters)]
        record = {"split": split, "iteration": iteration, "loss": sum(losses) / len(losses), "batches": spec.eval_iters}
        self.records.append(record)
        if rank.global_rank == 0:
            append_jsonl(rank.run_dir / names.VALIDATION, record)
        return record["loss"]

    def after(self, iteration: int) -> None:
        """Validation every eval_interval iterations, and after the last (collective)."""
        k = self.rank.spec.eval_interval
        if (k and iteration % k == 0) or iteration == self.rank.spec.iters:
            self.run("valid", iteration)

    def test(self) -> None:
        self.run("test", self.rank.spec.iters)
