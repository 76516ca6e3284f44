"""A Megatron indexed dataset (PREFIX.bin + PREFIX.idx, what Megatron-LM's preprocess_data.py
writes), read before any process starts without Megatron or torch: the index header (token dtype,
sequence and document counts) and the largest token id, so a dataset tokenized for another
vocabulary is refused by name instead of indexing out of the model's embedding. The format is
Megatron-Core's (megatron/core/datasets/indexed_dataset.py): a 9-byte magic, a little-endian u64
version, a u8 dtype code, u64 sequence and document counts, then the arrays; the .bin holds every
sequence's tokens back to back. tests/unit/test_data_formats.py holds this reader to Megatron's
own writer."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"MMIDIDX\x00\x00"
DTYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float64", 7: "float32", 8: "uint16"}


@dataclass(frozen=True)
class Header:
    dtype: str
    sequences: int
    documents: int  # Megatron's document index has documents + 1 entries


def header(prefix) -> Header:
    path = Path(str(prefix) + ".idx")
    with open(path, "rb") as f:
        magic = f.read(len(MAGIC))
        if magic != MAGIC:
            raise ValueError(f"{path} is not a Megatron index file (it does not start with {MAGIC!r}); give the "
                             "prefix of a dataset written by Megatron's IndexedDatasetBuilder (preprocess_data.py)")
        version, = struct.unpack("<Q", f.read(8))
        code, = struct.unpack("<B", f.read(1))
        sequences, documents = struct.unpack("<Q", f.read(8))[0], struct.unpack("<Q", f.read(8))[0]
    if version != 1 or code not in DTYPES:
        raise ValueError(f"{path}: index version {version} with dtype code {code} is not one this kit reads (1; "
                         f"{sorted(DTYPES)})")
    return Header(DTYPES[code], sequences, documents - 1)


def max_token_id(prefix, limit: int | None = None) -> int:
    """The largest token id in PREFIX.bin, or in its first `limit` tokens (one pass over a memory map;
    a dataset tokenized for another vocabulary shows ids beyond it from its first documents)."""
    import numpy

    tokens = numpy.memmap(str(prefix) + ".bin", dtype=header(prefix).dtype, mode="r")[:limit]
    return int(tokens.max()) if tokens.size else -1
