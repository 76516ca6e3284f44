"""The microbatches of one iteration, for this DP rank and every model chunk: what Megatron's
schedule pulls from its data iterators.

Samples are addressed by iteration: iteration i of a split takes samples [i * global_batch,
(i + 1) * global_batch), each step of micro_batch * dp consecutive samples split across DP ranks
(rank r takes the r-th block of micro_batch samples), as Megatron's pretraining sampler does. A
sample never depends on TP/PP/CP/EP, so every layout sees the same global batch in the same order."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from helpers.runtime.data import synthetic

if TYPE_CHECKING:
    from helpers.runtime.worker import Rank, Trainee


def microbatches(dataset, iteration: int, spec, dp_rank: int):
    """This DP rank's microbatches of one iteration of a real-data split (a Megatron dataset)."""
    gb, mb, step = spec.global_batch_size, spec.micro_batch, spec.micro_batch * spec.dp
    for first in range(iteration * gb, (iteration + 1) * gb, step):
        lo = first + dp_rank * mb
        samples = [dataset[i] for i in range(lo, lo + mb)]
        yield {k: torch.stack([s[k] for s in samples]).contiguous()
               for k in ("tokens", "labels", "loss_mask", "position_ids")}


def for_chunks(rank: Rank, trainee: Trainee, splits: dict | None, split: str, iteration: int) -> list:
    """One iterator per model chunk (the interleaved schedule asks each chunk for its own) over
    this DP rank's microbatches of `iteration`: the split of the job's real data (`splits`: its
    Megatron datasets by split), or the synthetic source (`splits` None)."""
    spec = rank.spec
    if splits is None:
        return [iter(synthetic.microbatches(spec.seed, iteration, spec.global_batch_size, spec.micro_batch, spec.dp,
                                            rank.dp_rank, spec.seq_len, trainee.model_desc.vocab_size))
                for _ in trainee.model]
    return [iter(microbatches(splits[split], iteration, spec, rank.dp_rank)) for _ in trainee.model]
