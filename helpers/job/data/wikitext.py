"""WikiText-2 raw (`data="wikitext"`), first match wins:
  1. `data_dir` (a path): `<dir>/wikitext-2-raw-v1/wiki.{train,valid,test}.raw` (or the files
     directly in `<dir>`); valid and test are required, train is optional.
  2. `KIT_DATA_DIR` (same layout; CI points it at the kit's shared data folder).
  3. Hugging Face `datasets` (`Salesforce/wikitext`, `wikitext-2-raw-v1`) when installed and online;
     the rows are written back into the three raw files under the kit's cache.
  4. A generated corpus (`data_dir="generated"` asks for it directly), labelled `generated` in the
     manifest: WikiText-shaped articles of templated sentences, not real text.
When the train file is missing (the shared data folder has only valid and test), the kit trains
on the first 90% of the articles of `wiki.valid.raw`, validates on the last 10% and tests on
`wiki.test.raw`; the manifest says so. One document per article (`articles`)."""
from __future__ import annotations

import random
import re
from pathlib import Path

from helpers.errors import DataNotFound
from helpers.job import paths
from helpers.job.data.documents import text_pieces
from helpers.job.data.source import GENERATED, Source

WIKITEXT = "wikitext-2-raw-v1"
RAW = {"train": "wiki.train.raw", "valid": "wiki.valid.raw", "test": "wiki.test.raw"}
HOW_TO_GET = (f"set KIT_DATA_DIR (or data_dir) to a folder holding {WIKITEXT}/wiki.valid.raw and "
              f"wiki.test.raw (see data/README.md), install Hugging Face `datasets` on a connected "
              f"machine, or pass data_dir='generated' for the kit's generated corpus")
TRAIN_FRACTION = 0.9  # of wiki.valid.raw's articles, when the train file is missing


def source(data_dir: str | None) -> Source:
    """Where WikiText comes from (see the module docstring)."""
    env = paths.data_dir()
    if data_dir == GENERATED:
        return Source("text", GENERATED, {}, {s: "WikiText-shaped articles of templated sentences (no real text "
                                              "was available)" for s in RAW}, format="wikitext")
    if data_dir is not None:
        return _wikitext_splits(_wikitext_folder(Path(data_dir), "data_dir"), "local")
    if env is not None:
        return _wikitext_splits(_wikitext_folder(env, "KIT_DATA_DIR"), "local")
    return _from_huggingface() or source(GENERATED)


def documents(src: Source) -> dict[str, list[str]]:
    """Articles per split (train carved out of valid when there is no train file)."""
    if src.origin == GENERATED:
        return {s: articles(generated_wikitext(s)) for s in RAW}
    read = {s: articles(Path(p).read_text(encoding="utf-8")) for s, p in src.files.items()}
    if "train" not in read:  # no train file: carve train/valid out of the valid file's articles
        arts = read["valid"]
        cut = int(len(arts) * TRAIN_FRACTION)
        read["train"], read["valid"] = arts[:cut], arts[cut:]
    return read


def article_counts(src: Source) -> dict[str, int]:
    """Articles per split as `documents` divides them, counted line by line without keeping the text."""
    counts = {}
    for split, path in src.files.items():
        headings, text = 0, False
        for piece in text_pieces(Path(path)):
            headings += sum(1 for line in piece.splitlines(keepends=True) if HEADING.match(line.rstrip("\n")))
            text = text or bool(piece.strip())
        counts[split] = headings or int(text)
    if "train" not in counts:
        cut = int(counts["valid"] * TRAIN_FRACTION)
        counts["train"], counts["valid"] = cut, counts["valid"] - cut
    return counts


def readable(p: Path) -> bool:
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
                if not readable(p):
                    raise DataNotFound(f"WikiText: cannot read {p} ({what}); {HOW_TO_GET}")
            return folder
    raise DataNotFound(f"WikiText: no {RAW['valid']} / {RAW['test']} in {root / WIKITEXT} or {root} "
                       f"({what}); {HOW_TO_GET}")


def _wikitext_splits(folder: Path, origin: str) -> Source:
    files = {s: str(folder / f) for s, f in RAW.items() if readable(folder / f)}
    if "train" in files:
        splits = {s: f"{RAW[s]} ({origin})" for s in RAW}
    else:
        pct = int(TRAIN_FRACTION * 100)
        splits = {"train": f"first {pct}% of the articles of {RAW['valid']} (no {RAW['train']} here)",
                  "valid": f"last {100 - pct}% of the articles of {RAW['valid']}",
                  "test": RAW["test"]}
    return Source("text", origin, files, splits, format="wikitext")


def _from_huggingface() -> Source | None:
    """WikiText-2 raw through HF `datasets` on a connected machine; None when unavailable."""
    try:
        import datasets  # installed for Megatron-Bridge's training config; offline, load_dataset fails and the corpus falls through
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


HEADING = re.compile(r"^ = [^=].* = $")


def articles(text: str) -> list[str]:
    """Split WikiText raw text into articles at its top-level ' = Title = ' headings."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if HEADING.match(line.rstrip("\n"))]
    if not starts:
        return [text] if text.strip() else []
    # A heading is preceded by its ' \n' spacer line, which belongs to the article it opens.
    cuts = [max(0, s - 1) if s > 0 and not lines[s - 1].strip() else s for s in starts]
    cuts[0] = 0
    return ["".join(lines[a:b]) for a, b in zip(cuts, cuts[1:] + [len(lines)])]


