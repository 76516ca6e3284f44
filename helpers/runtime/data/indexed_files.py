"""Writing Megatron's indexed dataset (PREFIX.bin + PREFIX.idx) with Megatron-Core's own
IndexedDatasetBuilder: the one writer of the worker's tokenized corpora (indexed.py) and of a
lesson's blended corpora (blend.py)."""
from __future__ import annotations

from pathlib import Path

import torch
from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder


def write_indexed(prefix: Path, docs: list[list[list[int]]], vocab: int) -> None:
    """One document per entry, each a list of sequences (text: [ids]; chat: [ids, trained])."""
    builder = IndexedDatasetBuilder(str(prefix) + ".bin", dtype=DType.optimal_dtype(vocab))
    for seqs in docs:
        for s in seqs:
            builder.add_item(torch.tensor(s, dtype=torch.int64))
        builder.end_document()
    builder.finalize(str(prefix) + ".idx")
