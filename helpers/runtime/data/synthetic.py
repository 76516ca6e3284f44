"""A deterministic, learnable token source: sample g of the run is an arithmetic progression
(start + stride * t) mod 64, with start and stride drawn from a generator seeded by (seed, g).
Early tokens of a sample are unpredictable and later ones are not, so the loss falls quickly.
The sample a rank gets depends only on (iteration, microbatch, DP rank), never on TP/PP/EP, so
every layout sees the same global batch in the same order."""
from __future__ import annotations

import torch

SPAN = 64  # tokens used: a model first learns that only these occur (loss ln V -> ln 64)


def sample(seed: int, index: int, seq_len: int, vocab: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1_000_003 + index)
    span = min(vocab, SPAN)
    start = int(torch.randint(span, (1,), generator=g))
    stride = int(torch.randint(1, 8, (1,), generator=g))
    return (start + stride * torch.arange(seq_len + 1)) % span


def microbatches(seed: int, iteration: int, global_batch: int, micro_batch: int, dp: int,
                 dp_rank: int, seq_len: int, vocab: int):
    """Yield this DP rank's microbatches of one iteration as dicts of tokens/labels/mask.
    Like Megatron's pretraining sampler: each step of micro_batch * dp consecutive samples is
    split across DP ranks, rank r taking the r-th block of micro_batch samples."""
    step = micro_batch * dp
    for first in range(iteration * global_batch, (iteration + 1) * global_batch, step):
        lo = first + dp_rank * micro_batch
        seqs = torch.stack([sample(seed, i, seq_len, vocab) for i in range(lo, lo + micro_batch)])
        yield {
            "tokens": seqs[:, :-1].contiguous(),
            "labels": seqs[:, 1:].contiguous(),
            "loss_mask": torch.ones(micro_batch, seq_len),
            "position_ids": torch.arange(seq_len).expand(micro_batch, seq_len).contiguous(),
        }
