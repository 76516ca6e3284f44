"""Source: what a job's workers read, decided before any process starts and recorded in the
manifest: which kind of data (text for continued pretraining, chat for SFT, or an already tokenized
Megatron indexed dataset), which files, which split holds what, and how it was obtained."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

GENERATED = "generated"  # data_dir value (and origin) of the kit's generated corpora
DEFAULT_SPLIT = "90,5,5"  # JobSpec.data_split's default


@dataclass
class Source:
    kind: str  # text (continued pretraining) | chat (SFT: loss on the answers) | indexed (tokenized already)
    origin: str  # local | huggingface | generated
    files: dict = field(default_factory=dict)  # role -> path: a split's file, "all" (one source), "prefix"
    splits: dict = field(default_factory=dict)  # split -> what it holds, in words
    format: str = "wikitext"  # wikitext | txt | jsonl | parquet | indexed | generated
    column: str | None = None  # the JSONL key / Parquet column read (None: the format has none)
    split: str | None = None  # Megatron's split weights "train,valid,test" for one source; None: a file per split
    tokenizer_dir: str | None = None  # where tokenizers/<name>/ is looked up (gpt2, qwen3)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Source":
        return cls(**d)
