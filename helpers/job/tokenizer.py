"""Tokenizers the kit trains with. Safe to import on both sides (no torch).

- `byte`: UTF-8 bytes are tokens 0-255, plus end-of-document (256) and padding (257). Vocabulary
  258, so it fits the tiny presets (vocab_size 512) unchanged: the fast choice for CPU runs.
- `gpt2`: OpenAI's GPT-2 byte-level BPE (50257 tokens) from `vocab.json` + `merges.txt`.
- `qwen3`: the Qwen3 tokenizer (151669 tokens with its added tokens) from `tokenizer.json`, as the
  seed cluster trained with.

`gpt2` and `qwen3` run through Hugging Face's `tokenizers` package (its Rust BPE); their files
are looked up under `<data dir>/tokenizers/<name>/` (the layout of the kit's shared data folder).
Each tokenizer exposes what Megatron-Core's datasets read from a tokenizer: `vocab_size`, `eod`,
`pad` and `unique_identifiers` (part of the index-cache key)."""
from __future__ import annotations

from pathlib import Path

from helpers.errors import DataNotFound
from helpers.job.paths import sha256

NAMES = ("byte", "gpt2", "qwen3")
FILES = {"byte": [], "gpt2": ["vocab.json", "merges.txt"], "qwen3": ["tokenizer.json"]}
HOW_TO_GET = ("put the tokenizer files under <data dir>/tokenizers/<name>/ (the kit's shared data "
              "folder has them; see data/README.md), set KIT_DATA_DIR to that data dir, or use "
              "tokenizer='byte', which needs no files")


def files(name: str, data_dir: Path | None) -> dict[str, Path]:
    """The files a tokenizer needs, checked to exist and be readable (clear error otherwise)."""
    if name not in NAMES:
        raise ValueError(f"unknown tokenizer {name!r}; choose one of {', '.join(NAMES)}")
    if not FILES[name]:
        return {}
    if data_dir is None:
        raise DataNotFound(f"tokenizer {name!r} needs {', '.join(FILES[name])} and no data dir is "
                           f"set: {HOW_TO_GET}")
    out = {}
    for f in FILES[name]:
        p = Path(data_dir) / "tokenizers" / name / f
        try:
            with open(p, "rb") as fh:
                fh.read(1)
        except OSError as e:
            raise DataNotFound(f"tokenizer {name!r}: cannot read {p} ({e.strerror or e}): {HOW_TO_GET}") from None
        out[f] = p
    return out


class ByteTokenizer:
    vocab_size = 258
    eod = 256
    pad = 257

    def __init__(self):
        self.name = "byte"
        self.unique_identifiers = {"class": "ByteTokenizer", "vocab_size": self.vocab_size}

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class BPETokenizer:
    """GPT-2 or Qwen3 through the `tokenizers` package; `eod` is the model's end-of-text token."""

    EOD = {"gpt2": "<|endoftext|>", "qwen3": "<|endoftext|>"}

    def __init__(self, name: str, paths: dict[str, Path]):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        if name == "qwen3":
            tok = Tokenizer.from_file(str(paths["tokenizer.json"]))
        else:
            tok = Tokenizer(models.BPE.from_file(str(paths["vocab.json"]), str(paths["merges.txt"])))
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tok.decoder = decoders.ByteLevel()
        self.name, self._tok = name, tok
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self.eod = tok.token_to_id(self.EOD[name])
        if self.eod is None:
            raise ValueError(f"tokenizer {name!r} has no {self.EOD[name]} token")
        self.pad = self.eod  # neither has a pad token; padded positions are masked out anyway
        self.unique_identifiers = {"class": "BPETokenizer", "name": name, "vocab_size": self.vocab_size,
                                   "files": {k: sha256(p) for k, p in paths.items()}}

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids) -> str:
        return self._tok.decode(list(ids))


def load(name: str, data_dir: Path | None = None):
    if name == "byte":
        return ByteTokenizer()
    return BPETokenizer(name, files(name, data_dir))


def vocab_size(name: str) -> int:
    """Vocabulary size without loading the files (for validating a job before it starts)."""
    return {"byte": ByteTokenizer.vocab_size, "gpt2": 50257, "qwen3": 151669}[name]
