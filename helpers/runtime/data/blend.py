"""Corpora blended by weight, as Megatron-LM reads `--data-path 0.7 PREFIX_A 0.3 PREFIX_B`: each
corpus a Megatron indexed dataset (`write_documents`: Megatron-Core's IndexedDatasetBuilder, one
document per entry, each ending with the tokenizer's end-of-document token), the value of
`--data-path` read by Megatron-Core's own `get_blend_from_list` (`from_data_path`), the blend built by
Megatron-Core's BlendedMegatronDatasetBuilder from `GPTDatasetConfig(blend=(prefixes, weights))`
(`build`), and the share of its samples each corpus gave (`shares`).

GPTDataset packs a corpus's documents end to end into samples of `sequence_length + 1` tokens,
across document boundaries; the end-of-document token is what still tells the model where one
document stopped and the next began. BlendedDataset then draws sample i from the corpus whose count
lags its weight the most (Megatron-Core's C++ `build_blending_indices`), so after n samples
each corpus's count is within one sample of weight x n: `shares` is within 1/n of the weights."""
from __future__ import annotations

from pathlib import Path

import numpy
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
from megatron.core.datasets.utils import get_blend_from_list

from helpers.errors import InvalidJob
from helpers.runtime.data.indexed_files import write_indexed


def write_documents(prefix: Path, texts: list[str], tokenizer) -> dict:
    """`prefix`.bin/.idx: one document per text, its token ids followed by `tokenizer.eod`. Returns the
    documents and tokens written (the end-of-document tokens included)."""
    docs = [[ids + [tokenizer.eod]] for ids in tokenizer.encode_batch(texts)]
    write_indexed(prefix, docs, tokenizer.vocab_size)
    tokens = sum(len(d[0]) for d in docs)
    return {"documents": len(texts), "tokens": tokens}


def from_data_path(value: str, root: Path | None = None) -> tuple[list[str], list[float]]:
    """(prefixes, weights) of a `--data-path` value ("0.7 A 0.3 B"), read by Megatron-Core's
    `get_blend_from_list` as Megatron-LM reads it; a prefix that is not absolute is taken in `root`.
    Raises InvalidJob naming what is wrong: no weights, a prefix with no .bin/.idx, a weight that is
    not positive."""
    if not isinstance(value, str) or not value.split():
        raise InvalidJob(f"--data-path takes a string of weights and prefixes, e.g. '0.5 A 0.5 B', not {value!r}")
    words = value.split()
    if words[0] == "--data-path":
        words = words[1:]
    numbers = [w for w in words if _number(w)]
    if numbers and len(words) % 2:
        raise InvalidJob(f"{value!r} has {len(words)} words: a weight and a prefix come in pairs ('0.7 A 0.3 B')")
    prefixes, weights = get_blend_from_list(words)
    if weights is None:
        raise InvalidJob(f"no weights in {value!r}: Megatron-LM reads a weight before each prefix "
                         "('0.7 A 0.3 B'); prefixes alone are blended by their sizes")
    if any(w <= 0 for w in weights):
        raise InvalidJob(f"weights {weights} in {value!r}: each must be above 0")
    resolved = [p if root is None or Path(p).is_absolute() else str(Path(root) / p) for p in prefixes]
    missing = [p for p, full in zip(prefixes, resolved)
               if not (Path(full + ".bin").is_file() and Path(full + ".idx").is_file())]
    if missing:
        raise InvalidJob(f"no indexed dataset at {', '.join(missing)}" + (f" (in {root})" if root else "")
                         + ": a prefix names PREFIX.bin and PREFIX.idx, without the suffix")
    return resolved, weights


def _number(word: str) -> bool:
    try:
        float(word)
        return True
    except ValueError:
        return False


def build(prefixes: list[str], weights: list[float] | None, samples: int, seq_len: int, tokenizer,
          cache: Path, seed: int = 1234):
    """The training split of the blend, `samples` samples of `seq_len` tokens, as Megatron-LM builds
    it (split 100/0/0: the whole of each corpus trains). Returns Megatron's BlendedDataset (a
    GPTDataset when there is one prefix)."""
    config = GPTDatasetConfig(random_seed=seed, sequence_length=seq_len, blend=(list(prefixes), weights),
                              split="100,0,0", path_to_cache=str(cache), tokenizer=tokenizer,
                              reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [samples, 0, 0], lambda: True, config).build()
    return train


def shares(dataset) -> list[float]:
    """The share of a BlendedDataset's samples drawn from each of its datasets, in blend order."""
    counts = numpy.bincount(numpy.asarray(dataset.dataset_index), minlength=len(dataset.datasets))
    return (counts / counts.sum()).tolist()
