"""What a job trains on, decided before any process starts (no torch): `resolve(spec)` turns
JobSpec.data (and data_dir, data_column, data_split) into a Source; `record(spec)` is the
manifest's account of it. The workers read the same Source (helpers/runtime/data/).

  source.py      Source: kind (text, chat, indexed), files, splits, format
  wikitext.py    data="wikitext": WikiText-2 from data_dir, KIT_DATA_DIR, HF datasets, or generated
  chat.py        conversations for SFT, the kit's generated set, the padded sample and its loss mask
  documents.py   data=PATH: folders of .txt, JSONL, Parquet, Megatron indexed datasets
  indexed.py     an indexed dataset's header and largest token id, read without Megatron
  tokenizers.py  byte, gpt2, qwen3 and an HF folder's own tokenizer (hf)
  pinned.py      Pinned: the Source with every file's size and SHA-256 (`pin`), what data.json holds
  sample.py      the first documents of each file parsed, every document counted (the data rule)"""
from __future__ import annotations

from pathlib import Path

from helpers.job import paths
from helpers.job.data import chat, documents, tokenizers, wikitext
from helpers.job.data.pinned import Pinned, pin
from helpers.job.data.sample import Sample, sample
from helpers.job.data.source import DEFAULT_SPLIT, GENERATED, Source

KINDS = ("synthetic", "wikitext", "sft")  # JobSpec.data's named sources; anything else is a path

__all__ = ["resolve", "pin", "sample", "read", "record", "spec_fields", "Source", "Pinned", "Sample", "KINDS",
           "GENERATED", "DEFAULT_SPLIT"]


def resolve(spec) -> Source | None:
    """The Source a job reads (None: synthetic tokens). DataNotFound or ValueError naming the
    problem and the fix."""
    if spec.data == "synthetic":
        return None
    if spec.data == "wikitext":
        src = wikitext.source(spec.data_dir)
    elif spec.data == "sft" and spec.data_dir in (None, GENERATED):
        src = Source("chat", GENERATED, {}, {s: "the kit's generated prompt/response tasks" for s in documents.SPLITS},
                     format="generated")
    else:
        src = documents.source(spec.data_dir if spec.data == "sft" else spec.data, spec.data_column, spec.data_split)
        if spec.data == "sft" and src.kind != "chat":
            raise ValueError(f"data='sft' reads conversations, but {spec.data_dir} holds {src.kind} (rows of "
                             f"{src.column!r}); give data={spec.data_dir!r} to train on it as text, or rows with "
                             "messages or prompt + response")
    env = paths.data_dir()
    named = Path(spec.data_dir) if spec.data_dir not in (None, GENERATED) and Path(spec.data_dir).is_dir() else None
    src.tokenizer_dir = str(named if named and (named / "tokenizers").is_dir() else env) if (named or env) else None
    return src


def read(src: Source) -> dict[str, list]:
    """The source's documents by role (a split, or "all" for one set of documents that Megatron's
    split divides): texts, or conversations for a chat source. Not for an indexed source (tokenized)."""
    if src.format == "wikitext":
        return wikitext.documents(src)
    if src.kind == "chat" and src.origin == GENERATED:
        return {s: [chat.conversation(row) for row in chat.generated(s)] for s in documents.SPLITS}
    return documents.documents(src)


def spec_fields(spec, src: Source) -> dict:
    """The JobSpec fields that make a rerun resolve to the same source (written into the spec)."""
    if spec.data == "wikitext":
        return {"data_dir": GENERATED if src.origin == GENERATED else str(Path(src.files["valid"]).parent)}
    if spec.data not in KINDS:
        return {"data": str(Path(spec.data).expanduser().resolve())}
    return {}


def record(spec, pinned: Pinned | None) -> dict | None:
    """The manifest's `data` record of a pinned source (pin(resolve(spec))): the source, its splits,
    the SHA-256 of every file (hashed when it was pinned), the tokenizer, and `pinned`, the JobSpec
    fields that make a rerun read the same source; None for synthetic data."""
    if pinned is None:
        return None
    src = pinned.source
    out = src.to_dict()
    out["sha256"] = pinned.sha256()
    folder = spec.hf_model if spec.tokenizer == "hf" else None
    out["tokenizer"] = {"name": spec.tokenizer, "vocab_size": tokenizers.vocab_size(spec.tokenizer, folder),
                        "files": {k: str(v) for k, v in tokenizers.files(
                            spec.tokenizer, Path(src.tokenizer_dir) if src.tokenizer_dir else None).items()},
                        **({"folder": folder} if folder else {})}
    out["format"] = {"chat": "padded: one example per sequence, loss on the answers only",
                     "text": "packed: Megatron GPTDataset (documents joined with end-of-document tokens)",
                     "indexed": "packed: Megatron GPTDataset over the given indexed dataset (not tokenized again)"
                     }[src.kind]
    out["pinned"] = spec_fields(spec, src)
    return out
