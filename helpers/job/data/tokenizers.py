"""The tokenizers the kit trains with (JobSpec.tokenizer). Safe to import on both sides (no torch).

- `hf`: the `hf_model` folder's own tokenizer, loaded as Megatron-LM loads one for
  `--tokenizer-type HuggingFaceTokenizer`: Megatron-Core's `HuggingFaceTokenizer` (transformers'
  AutoTokenizer on the local folder). Its end-of-document token is the tokenizer's eos token (as in
  Megatron), it adds what the tokenizer adds to every text (a BOS token, for some models), and it
  renders conversations with the tokenizer's chat template. `auto` (the default) is `hf` for an
  `hf_model` whose folder holds a tokenizer, else `byte`.
- `byte`: UTF-8 bytes are tokens 0-255, plus end-of-document (256) and padding (257). Vocabulary
  258, so it fits the tiny presets (vocab_size 512) unchanged: the fast choice for CPU runs.
- `gpt2`: OpenAI's GPT-2 byte-level BPE (50257 tokens) from `vocab.json` + `merges.txt`.
- `qwen3`: the Qwen3 tokenizer (151669 tokens with its added tokens) from `tokenizer.json`.
`gpt2` and `qwen3` run through Hugging Face's `tokenizers` package (its Rust BPE); their files are
looked up under `<data dir>/tokenizers/<name>/` (the layout of the kit's shared data folder).

Each tokenizer exposes what Megatron-Core's datasets read from one (`vocab_size`, `eod`, `pad`,
`unique_identifiers`: part of the index-cache key), `encode_batch`, `decode`, and `chat(messages)`:
a conversation's token ids and which of them are an assistant's answer (helpers/job/data/chat.py).
Before a job starts the rules need only `vocab_size(...)` and `has_chat_template(...)`, which read
the files without loading a model library."""
from __future__ import annotations

import json
from pathlib import Path

from helpers.errors import DataNotFound
from helpers.job.data import chat
from helpers.job.paths import sha256

NAMES = ("auto", "byte", "gpt2", "qwen3", "hf")
FILES = {"byte": [], "gpt2": ["vocab.json", "merges.txt"], "qwen3": ["tokenizer.json"]}
HF_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")  # any one makes a folder's tokenizer
HOW_TO_GET = ("put the tokenizer files under <data dir>/tokenizers/<name>/ (the kit's shared data "
              "folder has them; see data/README.md), set KIT_DATA_DIR to that data dir, or use "
              "tokenizer='byte', which needs no files")


def has_folder_tokenizer(folder) -> bool:
    return folder is not None and any((Path(folder) / f).is_file() for f in HF_FILES)


def files(name: str, data_dir: Path | None) -> dict[str, Path]:
    """The files a `gpt2`/`qwen3` tokenizer needs, checked to exist and be readable."""
    if not FILES.get(name):
        return {}
    if data_dir is None:
        raise DataNotFound(f"tokenizer {name!r} needs {', '.join(FILES[name])} and no data dir is "
                           f"set; {HOW_TO_GET}")
    out = {}
    for f in FILES[name]:
        p = Path(data_dir) / "tokenizers" / name / f
        try:
            with open(p, "rb") as fh:
                fh.read(1)
        except OSError as e:
            raise DataNotFound(f"tokenizer {name!r}: cannot read {p} ({e.strerror or e}); {HOW_TO_GET}") from None
        out[f] = p
    return out


def vocab_size(name: str, hf_folder=None) -> int:
    """Vocabulary size before a job starts (an `hf` folder's tokenizer.json read by `tokenizers`;
    transformers only for a folder without one)."""
    if name == "hf":
        path = Path(hf_folder) / "tokenizer.json"
        if path.is_file():
            from tokenizers import Tokenizer
            return Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True)
        from transformers import AutoTokenizer
        return len(AutoTokenizer.from_pretrained(str(hf_folder)))
    return {"byte": ByteTokenizer.vocab_size, "gpt2": 50257, "qwen3": 151669}[name]


def chat_template(name: str, hf_folder=None) -> str | None:
    """The tokenizer's chat template (only an `hf` folder's tokenizer has one): chat_template.jinja,
    or `chat_template` in tokenizer_config.json."""
    if name != "hf":
        return None
    folder = Path(hf_folder)
    if (folder / "chat_template.jinja").is_file():
        return (folder / "chat_template.jinja").read_text()
    config = folder / "tokenizer_config.json"
    template = json.loads(config.read_text()).get("chat_template") if config.is_file() else None
    return template if isinstance(template, str) else None


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

    def chat(self, messages: list[dict]) -> tuple[list[int], list[int]]:
        return pair(self, messages)


class BPETokenizer(ByteTokenizer):
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


class HFTokenizer:
    """An hf_model folder's tokenizer through Megatron-Core's HuggingFaceTokenizer (worker side:
    imports transformers)."""

    def __init__(self, folder):
        from megatron.core.tokenizers.text.libraries.huggingface_tokenizer import HuggingFaceTokenizer

        self.name, self.folder = "hf", Path(folder)
        self.megatron = HuggingFaceTokenizer(str(folder))
        self.hf = self.megatron.tokenizer  # transformers' tokenizer, for its batch encoder and chat template
        self.vocab_size = self.megatron.vocab_size
        self.eod = self.megatron.eod
        self.pad = self.hf.pad_token_id if self.hf.pad_token_id is not None else self.eod
        self.unique_identifiers = {"class": "HFTokenizer", "vocab_size": self.vocab_size,
                                   "files": {p.name: sha256(p) for p in sorted(self.folder.iterdir())
                                             if p.name.startswith(("tokenizer", "special_tokens", "chat_template",
                                                                   "vocab", "merges"))}}

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Each text as the tokenizer encodes it alone (its BOS token included, if it adds one)."""
        return self.hf(texts, add_special_tokens=True)["input_ids"]

    def decode(self, ids) -> str:
        return self.megatron.ids_to_text(list(ids))

    def chat(self, messages: list[dict]) -> tuple[list[int], list[int]]:
        """The conversation through the tokenizer's chat template; an answer's tokens are those whose
        text lies between the prompt for that answer (the template with a generation prompt) and the
        conversation up to the answer's end. A template whose shorter renderings are not prefixes of
        the longer ones cannot be split that way: ValueError."""
        if self.hf.chat_template is None:  # a prompt/response pair only: the prompt as a text of its own
            if not chat.is_pair(messages):
                raise ValueError("this tokenizer has no chat template, so a conversation cannot be rendered")
            prompt = self.hf(messages[0]["content"], add_special_tokens=True)["input_ids"]
            response = self.hf(messages[1]["content"], add_special_tokens=False)["input_ids"] + [self.eod]
            return prompt + response, [0] * len(prompt) + [1] * len(response)

        def render(upto: int, prompt: bool) -> str:
            return self.megatron.apply_chat_template(messages[:upto], None, tokenize=False,
                                                     add_generation_prompt=prompt)

        text = render(len(messages), False)
        spans = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            start, end = render(i, True), render(i + 1, False)
            if not (text.startswith(end) and end.startswith(start)):
                raise ValueError("the chat template does not render a conversation turn by turn (a shorter "
                                 "conversation is not a prefix of a longer one): its answers cannot be told apart")
            spans.append((len(start), len(end)))
        enc = self.hf(text, add_special_tokens=False, return_offsets_mapping=True)
        trained = [int(any(a <= lo < b for a, b in spans)) for lo, _ in enc["offset_mapping"]]
        return list(enc["input_ids"]), trained


def pair(tokenizer, messages: list[dict]) -> tuple[list[int], list[int]]:
    """A prompt/response pair without a chat template: the prompt's tokens, then the response's and
    the end-of-document token, which are trained on."""
    if not chat.is_pair(messages):
        raise ValueError(f"tokenizer {tokenizer.name!r} has no chat template: it trains prompt/response pairs "
                         "only, not conversations with other turns")
    prompt, response = tokenizer.encode_batch([messages[0]["content"], messages[1]["content"]])
    return prompt + response + [tokenizer.eod], [0] * len(prompt) + [1] * (len(response) + 1)


def load(name: str, data_dir: Path | None = None, hf_folder=None):
    """The tokenizer `name` (resolved: not auto) for a worker."""
    if name == "byte":
        return ByteTokenizer()
    if name == "hf":
        return HFTokenizer(hf_folder)
    return BPETokenizer(name, files(name, data_dir))
