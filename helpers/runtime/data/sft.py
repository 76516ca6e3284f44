"""SFTDataset: chat examples for supervised fine-tuning, as a Megatron dataset that Megatron's
BlendedMegatronDatasetBuilder builds (and Megatron's `split` divides) from the kit's indexed files
(indexed.py)."""
from __future__ import annotations

import numpy
import torch
from megatron.core.datasets.indexed_dataset import IndexedDataset
from megatron.core.datasets.megatron_dataset import MegatronDataset

from helpers.job.data import chat


class SFTDataset(MegatronDataset):
    """Chat examples, one per sample, **padded** (not packed) to seq_len: the local attention has no
    per-document masking, so packing would let an example attend to the one before it. Loss only on
    the answers' tokens (helpers/job/data/chat.sample). Stored as a Megatron indexed dataset whose
    documents are [token ids, trained] sequence pairs (trained: 1 for an answer's token)."""

    @staticmethod
    def numel_low_level_dataset(low_level_dataset: IndexedDataset) -> int:
        return low_level_dataset.document_indices.shape[0] - 1

    @staticmethod
    def build_low_level_dataset(dataset_path: str, config) -> IndexedDataset:
        return IndexedDataset(dataset_path, multimodal=False, mmap=config.mmap_bin_files)

    def __init__(self, *args):
        super().__init__(*args)
        # Epochs over this split's examples, each in its own seeded order (same on every rank).
        n = len(self.indices)
        epochs = -(-max(self.num_samples or n, 1) // n)
        rng = numpy.random.RandomState(self.config.random_seed)
        self.order = numpy.concatenate([self.indices[rng.permutation(n)] for _ in range(epochs)])

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, idx: int) -> dict:
        doc = int(self.order[idx])
        first = int(self.dataset.document_indices[doc])
        ids, trained = self.dataset[first].astype(numpy.int64), self.dataset[first + 1].astype(numpy.int64)
        sample = chat.sample(ids, trained, self.config.sequence_length, self.config.tokenizer.pad)
        return {k: torch.from_numpy(v) for k, v in sample.items()}


