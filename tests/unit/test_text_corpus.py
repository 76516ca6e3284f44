"""benchmarks/common/text_corpus.py: a folder of text files becomes the three WikiText-layout files that
`data="wikitext", data_dir=...` reads, one article per file, split by a hash of the path."""
from pathlib import Path

import pytest

from benchmarks.common import text_corpus
from helpers.job.data import wikitext


def write_files(folder: Path, n: int) -> list[str]:
    names = []
    for i in range(n):
        rel = f"part{i % 3}/doc{i:03d}.txt"
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(f"Document {i}.\n\nSecond paragraph of {i}.\n", encoding="utf-8")
        names.append(rel)
    return names


def read_articles(out: Path) -> dict[str, list[str]]:
    folder = out / wikitext.WIKITEXT
    return {s: wikitext.articles((folder / f).read_text(encoding="utf-8")) for s, f in wikitext.RAW.items()}


def test_every_file_is_one_article_of_one_split_and_the_kit_reads_the_folder(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    names = write_files(src, 120)
    (src / "part0" / "doc000.txt").write_text("Top.\n = Looks like a heading = \nEnd.\n", encoding="utf-8")
    facts = text_corpus.build(src, out, "**/*.txt")
    arts = read_articles(out)
    assert {s: len(a) for s, a in arts.items()} == {s: f["files"] for s, f in facts.items()}
    assert sum(len(a) for a in arts.values()) == len(names)
    assert all(arts[s] for s in arts) and len(arts["train"]) > 90  # ~5% each held out
    titles = {a.split(" = ")[1]: s for s, group in arts.items() for a in group}
    assert titles == {n: text_corpus.split_of(n) for n in names}
    escaped = next(a for group in arts.values() for a in group if " = part0/doc000.txt = " in a)
    assert "\n  = Looks like a heading = \n" in escaped  # indented: not an article boundary
    src_resolved = wikitext.source(str(out))
    assert set(src_resolved.files) == {"train", "valid", "test"}  # the train file is used, not carved


def test_the_split_does_not_move_when_a_file_is_added(tmp_path):
    src = tmp_path / "src"
    write_files(src, 60)
    text_corpus.build(src, tmp_path / "a", "**/*.txt")
    (src / "extra.txt").write_text("New.\n", encoding="utf-8")
    text_corpus.build(src, tmp_path / "b", "**/*.txt")
    before, after = read_articles(tmp_path / "a"), read_articles(tmp_path / "b")
    moved = {s: set(after[s]) - set(before[s]) for s in before}
    assert sum(len(m) for m in moved.values()) == 1 and all(set(before[s]) <= set(after[s]) for s in before)


def test_nothing_to_read_is_one_clear_error(tmp_path):
    (tmp_path / "src").mkdir()
    with pytest.raises(SystemExit, match="no files match"):
        text_corpus.build(tmp_path / "src", tmp_path / "out", "**/*.txt")
    (tmp_path / "src" / "one.txt").write_text("x\n")
    with pytest.raises(SystemExit, match="split empty"):
        text_corpus.build(tmp_path / "src", tmp_path / "out", "**/*.txt")
