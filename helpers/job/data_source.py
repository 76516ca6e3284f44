"""Where a job's text comes from, decided before any process starts. Safe to import on both sides.

WikiText-2 raw (`data="wikitext"`), first match wins:
  1. `data_dir` (a path): `<dir>/wikitext-2-raw-v1/wiki.{train,valid,test}.raw` (or the files
     directly in `<dir>`); valid and test are required, train is optional.
  2. `KIT_DATA_DIR` (same layout; CI points it at the kit's shared data folder).
  3. Hugging Face `datasets` (`Salesforce/wikitext`, `wikitext-2-raw-v1`) when installed and online;
     the rows are written back into the three raw files under the kit's cache.
  4. A generated corpus (`data_dir="generated"` asks for it directly), labelled `generated` in the
     manifest: WikiText-shaped articles of templated sentences, not real text.
When the train file is missing (the shared data folder has only valid and test), the kit trains
on the first 90% of the articles of `wiki.valid.raw`, validates on the last 10% and tests on
`wiki.test.raw`; the manifest says so.

Supervised fine-tuning (`data="sft"`): JSON Lines, one `{"prompt": ..., "response": ...}` object
per line. `data_dir` is a `.jsonl` file (split by order: 80% train, 10% valid, 10% test) or a
folder with `train.jsonl` (+ optional `valid.jsonl`, `test.jsonl`); without it the kit generates a
small offline set (`sft_examples`)."""
from __future__ import annotations

import json
import random
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from helpers.errors import DataNotFound
from helpers.job import paths, tokenizer
from helpers.job.spec import DATA_KINDS

WIKITEXT = "wikitext-2-raw-v1"
RAW = {"train": "wiki.train.raw", "valid": "wiki.valid.raw", "test": "wiki.test.raw"}
HOW_TO_GET = (f"set KIT_DATA_DIR (or data_dir) to a folder holding {WIKITEXT}/wiki.valid.raw and "
              f"wiki.test.raw (see data/README.md), install Hugging Face `datasets` on a connected "
              f"machine, or pass data_dir='generated' for the kit's generated corpus")
GENERATED = "generated"
TRAIN_FRACTION = 0.9  # of wiki.valid.raw's articles, when the train file is missing


@dataclass
class Source:
    """What the workers read: raw text files (or JSONL) per split, plus how they were obtained."""
    kind: str  # wikitext | sft
    origin: str  # local | huggingface | generated
    files: dict = field(default_factory=dict)  # file role -> path (local/huggingface origins)
    splits: dict = field(default_factory=dict)  # split -> human description of what it holds
    tokenizer_dir: str | None = None  # where tokenizers/<name>/ is looked up

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Source":
        return cls(**d)


def _readable(p: Path) -> bool:
    try:
        with open(p, "rb") as f:
            f.read(1)
        return True
    except OSError:
        return False


def _wikitext_folder(root: Path, what: str) -> Path:
    for folder in (root / WIKITEXT, root):
        if (folder / RAW["valid"]).exists() or (folder / RAW["test"]).exists():
            for split in ("valid", "test"):
                p = folder / RAW[split]
                if not _readable(p):
                    raise DataNotFound(f"WikiText: cannot read {p} ({what}); {HOW_TO_GET}")
            return folder
    raise DataNotFound(f"WikiText: no {RAW['valid']} / {RAW['test']} in {root / WIKITEXT} or {root} "
                       f"({what}); {HOW_TO_GET}")


def _wikitext_splits(folder: Path, origin: str) -> Source:
    files = {s: str(folder / f) for s, f in RAW.items() if _readable(folder / f)}
    if "train" in files:
        splits = {s: f"{RAW[s]} ({origin})" for s in RAW}
    else:
        pct = int(TRAIN_FRACTION * 100)
        splits = {"train": f"first {pct}% of the articles of {RAW['valid']} (no {RAW['train']} here)",
                  "valid": f"last {100 - pct}% of the articles of {RAW['valid']}",
                  "test": RAW["test"]}
    return Source("wikitext", origin, files, splits)


def _from_huggingface() -> Source | None:
    """WikiText-2 raw through HF `datasets` on a connected machine; None when unavailable."""
    try:
        import datasets  # optional: not a dependency of the kit
    except ImportError:
        return None
    folder = paths.cache_dir() / "data" / f"huggingface-{WIKITEXT}"
    if not all((folder / f).exists() for f in RAW.values()):
        try:
            ds = datasets.load_dataset("Salesforce/wikitext", WIKITEXT)
        except Exception:  # offline, hub unreachable: fall through to the generated corpus
            return None
        folder.mkdir(parents=True, exist_ok=True)
        for split, hf_split in (("train", "train"), ("valid", "validation"), ("test", "test")):
            (folder / RAW[split]).write_text(rows_to_raw(ds[hf_split]["text"]), encoding="utf-8")
    return _wikitext_splits(folder, "huggingface")


def rows_to_raw(rows) -> str:
    """HF rows back into the raw file: an empty row is the line ' \\n'; other rows end in '\\n'."""
    return "".join(r if r else " \n" for r in rows)


def _generated(kind: str) -> Source:
    what = ("WikiText-shaped articles of templated sentences (no real text was available)"
            if kind == "wikitext" else "the kit's generated prompt/response tasks")
    return Source(kind, GENERATED, {}, {"train": what, "valid": what, "test": what})


def resolve(data: str, data_dir: str | None) -> Source:
    """Decide where the text comes from (see the module docstring); clear error when a named
    location lacks the files."""
    if data not in DATA_KINDS:
        raise ValueError(f"data must be one of {', '.join(DATA_KINDS)}, not {data!r}")
    env = paths.data_dir()
    if data == "sft":
        if data_dir in (None, GENERATED):
            src = _generated("sft")
        else:
            src = _sft_files(Path(data_dir))
    elif data_dir == GENERATED:
        src = _generated("wikitext")
    elif data_dir is not None:
        src = _wikitext_splits(_wikitext_folder(Path(data_dir), "data_dir"), "local")
    elif env is not None:
        src = _wikitext_splits(_wikitext_folder(env, "KIT_DATA_DIR"), "local")
    else:
        src = _from_huggingface() or _generated("wikitext")
    tok_root = Path(data_dir) if data_dir not in (None, GENERATED) and Path(data_dir).is_dir() else env
    if tok_root is not None and not (tok_root / "tokenizers").is_dir() and env is not None:
        tok_root = env
    src.tokenizer_dir = str(tok_root) if tok_root is not None else None
    return src


def pinned_data_dir(src: Source) -> str | None:
    """The data_dir value that makes a rerun resolve to the same source (written into the spec)."""
    if src.origin == GENERATED:
        return GENERATED
    if src.kind == "sft":
        return src.files.get("jsonl") or str(Path(src.files["train"]).parent)
    return str(Path(src.files["valid"]).parent)


def _sft_files(p: Path) -> Source:
    how = ("give data_dir as a .jsonl file or a folder with train.jsonl (+ valid.jsonl, test.jsonl), "
           'one {"prompt": ..., "response": ...} object per line; or leave it unset for the kit\'s '
           "generated set")
    if p.is_file() or p.suffix == ".jsonl":
        if not _readable(p):
            raise DataNotFound(f"SFT data: cannot read {p}; {how}")
        return Source("sft", "local", {"jsonl": str(p)},
                      {"train": f"first 80% of the lines of {p.name}", "valid": f"next 10% of {p.name}",
                       "test": f"last 10% of {p.name}"})
    train = p / "train.jsonl"
    if not _readable(train):
        raise DataNotFound(f"SFT data: cannot read {train}; {how}")
    files = {s: str(p / f"{s}.jsonl") for s in ("train", "valid", "test") if _readable(p / f"{s}.jsonl")}
    splits = {s: f"{s}.jsonl" for s in files}
    for s in ("valid", "test"):
        if s not in files:
            splits[s] = f"10% of train.jsonl (no {s}.jsonl)"
    return Source("sft", "local", files, splits)


def sft_splits(src: Source) -> dict[str, list[dict]]:
    """SFT examples per split: a .jsonl file split by order (80/10/10), a folder's train.jsonl
    (+ valid/test, else the last tenths of train), or the generated set. Raises ValueError naming
    the file and line of an example that does not parse."""
    if src.origin == GENERATED:
        return {s: sft_examples(s) for s in ("train", "valid", "test")}
    if "jsonl" in src.files:
        rows = read_jsonl(Path(src.files["jsonl"]))
        a, b = int(len(rows) * 0.8), int(len(rows) * 0.9)
        return {"train": rows[:a], "valid": rows[a:b], "test": rows[b:]}
    rows = {s: read_jsonl(Path(p)) for s, p in src.files.items()}
    train = rows["train"]
    tenth = max(1, len(train) // 10)
    for i, s in enumerate(("valid", "test")):
        if s not in rows:
            rows[s] = train[len(train) - (2 - i) * tenth:len(train) - (1 - i) * tenth]
    rows["train"] = train[:len(train) - tenth * sum(s not in src.files for s in ("valid", "test"))]
    return rows


def describe(src: Source, tokenizer_name: str) -> dict:
    """For the manifest: the source, its split assignment and the SHA-256 of every file."""
    out = src.to_dict()
    out["sha256"] = {k: paths.sha256(Path(v)) for k, v in src.files.items()}
    out["tokenizer"] = {"name": tokenizer_name, "vocab_size": tokenizer.vocab_size(tokenizer_name),
                        "files": {k: str(v) for k, v in tokenizer.files(
                            tokenizer_name, Path(src.tokenizer_dir) if src.tokenizer_dir else None).items()}}
    return out


# ---- the generated corpora (deterministic: same text on every node and every run) -----------
_NOUNS = ("river castle village engine garden harbour library mountain forest bridge railway market "
          "cathedral island valley ship army painter composer poet").split()
_ADJS = "old northern large famous small ancient royal quiet busy eastern".split()
_VERBS = "built crossed visited described defended painted rebuilt named surveyed governed".split()
_YEARS = [str(y) for y in range(1801, 1999, 7)]


def _sentence(rng: random.Random) -> str:
    a, n1, v, n2, y = (rng.choice(_ADJS), rng.choice(_NOUNS), rng.choice(_VERBS), rng.choice(_NOUNS),
                       rng.choice(_YEARS))
    return rng.choice([f"The {a} {n1} was {v} in {y} .", f"In {y} , the {n1} {v} the {a} {n2} .",
                       f"The {n2} near the {a} {n1} was {v} by the {n1} ."])


def generated_wikitext(split: str, articles: int | None = None) -> str:
    """WikiText-shaped text: ' = Title = ' headings, paragraphs of templated sentences."""
    count = articles or {"train": 120, "valid": 12, "test": 12}[split]
    rng = random.Random(f"kit-generated-{split}")
    out = []
    for _ in range(count):
        out.append(f" \n = The {rng.choice(_ADJS).title()} {rng.choice(_NOUNS).title()} = \n \n")
        for _ in range(rng.randint(2, 4)):
            out.append(" " + " ".join(_sentence(rng) for _ in range(rng.randint(3, 6))) + " \n")
    return "".join(out)


_WORDS = ("apple stone river cloud tiger piano garden candle rocket pepper silver window planet "
          "forest marble dragon bottle carpet ladder magnet").split()


def sft_examples(split: str, count: int | None = None) -> list[dict]:
    """Small prompt/response tasks a tiny model can start to learn: reverse, uppercase, add."""
    n = count or {"train": 400, "valid": 40, "test": 40}[split]
    rng = random.Random(f"kit-sft-{split}")
    out = []
    for _ in range(n):
        task = rng.randrange(3)
        if task == 0:
            w = rng.choice(_WORDS)
            out.append({"prompt": f"Reverse the word: {w}\nAnswer: ", "response": w[::-1]})
        elif task == 1:
            w = rng.choice(_WORDS)
            out.append({"prompt": f"Uppercase: {w}\nAnswer: ", "response": w.upper()})
        else:
            a, b = rng.randrange(10, 50), rng.randrange(10, 50)
            out.append({"prompt": f"What is {a} plus {b}?\nAnswer: ", "response": str(a + b)})
    return out


def read_jsonl(path: Path) -> list[dict]:
    """User SFT data; each line must be an object with string `prompt` and `response`."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}, line {n}: not JSON ({e.msg})") from None
            if not (isinstance(obj, dict) and isinstance(obj.get("prompt"), str)
                    and isinstance(obj.get("response"), str) and obj["response"]):
                raise ValueError(f'{path}, line {n}: expected {{"prompt": str, "response": non-empty str}}, '
                                 f"got {line.strip()[:80]!r}")
            out.append({"prompt": obj["prompt"], "response": obj["response"]})
    if not out:
        raise ValueError(f"{path}: no examples")
    return out


def sft_sample(prompt, response, seq_len: int, pad: int) -> dict:
    """tokens/labels/loss_mask/position_ids (numpy int64/float32 arrays) of one padded SFT example.
    A prompt too long for seq_len loses its beginning so that at least some response tokens are
    trained on; a long response is cut. The worker's SFTDataset (helpers/runtime/data.py) turns
    these into tensors; notebooks call it to show what one example looks like."""
    import numpy

    prompt, response = numpy.asarray(prompt, dtype=numpy.int64), numpy.asarray(response, dtype=numpy.int64)
    keep = min(len(response), max(1, seq_len // 2))
    prompt = prompt[max(0, len(prompt) - (seq_len + 1 - keep)):]
    seq = numpy.concatenate([prompt, response])[:seq_len + 1]
    n = len(seq) - 1  # predicted positions
    tokens = numpy.full(seq_len, pad, dtype=numpy.int64)
    labels = numpy.full(seq_len, pad, dtype=numpy.int64)
    mask = numpy.zeros(seq_len, dtype=numpy.float32)
    tokens[:n], labels[:n] = seq[:-1], seq[1:]
    mask[max(0, len(prompt) - 1):n] = 1.0  # label j is seq[j + 1]: a response token from j = len(prompt) - 1
    return {"tokens": tokens, "labels": labels, "loss_mask": mask,
            "position_ids": numpy.arange(seq_len, dtype=numpy.int64)}


_HEADING = re.compile(r"^ = [^=].* = $")


def articles(text: str) -> list[str]:
    """Split WikiText raw text into articles at its top-level ' = Title = ' headings."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if _HEADING.match(line.rstrip("\n"))]
    if not starts:
        return [text] if text.strip() else []
    # A heading is preceded by its ' \n' spacer line, which belongs to the article it opens.
    cuts = [max(0, s - 1) if s > 0 and not lines[s - 1].strip() else s for s in starts]
    cuts[0] = 0
    return ["".join(lines[a:b]) for a, b in zip(cuts, cuts[1:] + [len(lines)])]


def record(spec) -> dict | None:
    """The manifest's `data` record of a checked job (helpers/job/rules/data.py): source, splits,
    SHA-256 of every file, tokenizer, and `pinned_data_dir`, the data_dir value that makes a rerun
    read the same source; None for synthetic data."""
    if spec.data == "synthetic":
        return None
    src = resolve(spec.data, spec.data_dir)
    out = describe(src, spec.tokenizer)
    out["pinned_data_dir"] = pinned_data_dir(src)
    out["format"] = ("padded: one example per sequence, loss on response tokens only" if spec.data == "sft"
                     else "packed: Megatron GPTDataset (documents joined with end-of-document tokens)")
    return out
