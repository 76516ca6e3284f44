"""A folder of text files as a corpus in WikiText's three-file layout, for loss comparisons that
WikiText-2's valid split is too small for.

Why: this workplace has only WikiText-2's valid and test splits, so the kit trains on ~0.22M tokens
of the valid split. A long run at a large global batch (200 iterations x 64 x 2048 tokens = 26M
tokens, ~120 passes) memorises that text, and the final loss then measures how fast a run
memorises rather than what its precision does to training (docs/results/precision.md). Any larger
body of real text works; the GPU runs used Python 3.11's documentation sources (reST, 497 files, 11
MB, 3.55M GPT-2 tokens: ~8 passes in such a run), from Debian's `python3.11-doc` package:

    apt-get download python3.11-doc && dpkg-deb -x python3.11-doc_*.deb pydoc
    python -m benchmarks.common.text_corpus pydoc/usr/share/doc/python3.11/html/_sources DIR --glob '**/*.rst.txt'
    # then launch.run(data="wikitext", data_dir="DIR", ...) or benchmarks.speed.precision --data-dir DIR

Each file becomes one article (a ' = relative/path = ' heading, the kit's article boundary, then
its text); files go to valid or test by a hash of their path (about 5% each), so the split is the
same on every machine and does not move when a file is added. Lines of a file that would read as
an article heading are indented by one space.
"""
import argparse
import hashlib
from pathlib import Path

from helpers.job.data.wikitext import (
    HEADING,  # the kit's article boundary, which a file's own lines must not match
    RAW,
    WIKITEXT,
)

HELD_OUT_PERCENT = 5  # each of valid and test


def split_of(relative: str) -> str:
    bucket = int(hashlib.sha256(relative.encode()).hexdigest(), 16) % 100
    return "valid" if bucket < HELD_OUT_PERCENT else "test" if bucket < 2 * HELD_OUT_PERCENT else "train"


def article(relative: str, text: str) -> str:
    lines = [(" " + line if HEADING.match(line) else line) for line in text.splitlines()]
    return f" \n = {relative} = \n \n" + "\n".join(lines) + "\n"


def build(src: Path, out: Path, pattern: str) -> dict:
    files = sorted(p for p in src.glob(pattern) if p.is_file())
    if not files:
        raise SystemExit(f"no files match {pattern!r} under {src}: give the folder that holds the text files")
    parts = {s: [] for s in RAW}
    for p in files:
        rel = p.relative_to(src).as_posix()
        parts[split_of(rel)].append(article(rel, p.read_text(encoding="utf-8", errors="replace")))
    empty = [s for s, arts in parts.items() if not arts]
    if empty:
        raise SystemExit(f"{len(files)} files leave the {', '.join(empty)} split empty: give more files")
    folder = out / WIKITEXT
    folder.mkdir(parents=True, exist_ok=True)
    for split, arts in parts.items():
        (folder / RAW[split]).write_text("".join(arts), encoding="utf-8")
    return {s: {"files": len(a), "chars": sum(map(len, a))} for s, a in parts.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="folder of text files")
    ap.add_argument("out", type=Path, help=f"writes OUT/{WIKITEXT}/wiki.{{train,valid,test}}.raw")
    ap.add_argument("--glob", default="**/*.txt", help="which files under SRC (default **/*.txt)")
    args = ap.parse_args()
    for split, facts in build(args.src, args.out, args.glob).items():
        print(f"{split}: {facts['files']} files, {facts['chars']:,} characters")


if __name__ == "__main__":
    main()
