"""The product speaks of the product: no development history in tracked text (README, docs, lessons,
code, docstrings, tests, scripts). History lives in git. What counts as history here:

- the team's issue numbers: "issue N", "#N";
- numbered runs of a measurement campaign: "run N", "(run N)", "runs N-M";
- commit hashes named in prose: "as of commit <hash>";
- words for what the code was (HISTORY spells them out): an adverb for an earlier version, a thing
  that "used to" fail, a rename, a fix, "until" a file gave something, what the kit stopped doing,
  and a measure of the code as it was (a time followed by "before").

Not history: upstream references that a reader can look up ("Megatron-LM issue #1589", "PR #6839"),
colours ("#333333"), "run" as a verb with a count ("DP=2 ranks run 2 each"), "before" and "no longer"
about a job or a tensor ("refused before start", "heads no longer divide"), and "used to" for a
purpose ("the scale used to cast"). Raw results files (*.json beside the benchmarks) are records, not
prose, and are not read."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = {".md", ".py", ".ipynb", ".toml", ".yml", ".yaml", ".sh", ".sbatch", ".mjs", ".txt", ".cfg"}
TEXT_NAMES = {"Makefile", "run"}  # .ci/run

COUNTED = ("each|times?|iterations?|steps?|jobs?|processes|ranks?|layers?|microbatches|layouts|models|tests"
           "|notebooks|lessons|trials|calls|nodes|GPUs")  # "ranks run 2 each": the verb with a count
HISTORY = re.compile(
    r"\bissues? #?\d+"  # the team's issue numbers
    r"|(?<![\w&])#(?![0-9a-fA-F]{6}\b|[0-9a-fA-F]{3}\b)\d+\b"  # "#N", not a colour
    rf"|\bruns? \d+(?:\s*[-–]\s*\d+)?\b(?!\s+(?:{COUNTED})\b)(?![.,]\d)"  # "run N", "runs N-M"
    r"|\bcommit [0-9a-f]{7,40}\b"  # "as of commit <hash>"
    r"|\b(?:previousl[y]|formerl[y]|anymor[e])\b"  # what the code was (spelt so this line holds none)
    r"|\bused to (?:be|fail|raise|crash|hang|need|work|leak|break|deadlock)\b"  # not "the scale used to cast"
    r"|\b(?:was|were|has been|have been|had been) (?:renamed|rewritten)\b|\bwas changed to\b"
    r"|\b(?:now|since) fixed\b|\bfixed now\b"
    r"|\buntil [\w/.`]+ (?:gave|added|made|fixed|moved|replaced|became)\b"  # "until <file> gave it a queue"
    r"|\b(?:the kit|this (?:file|module|function|class|test|rule)) no longer\b"
    r"|\d\s*(?:s|ms|min|MB|GB|MiB|GiB|%|x)\b[^.;()\n]{0,40}?\bbefore(?=\s*(?:[),;]|\.(?!\w)|$))",  # "13 s ... before)"
    re.IGNORECASE)
UPSTREAM = re.compile(r"(?:Megatron-LM|Megatron-Bridge|NeMo|PyTorch|transformers)\s+(?:issue\s+|PR\s+)?#?\d+"
                      r"|\bPR\s+#\d+", re.IGNORECASE)

def tracked_text_files() -> list[Path]:
    try:
        names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file under the root
        names = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    return [ROOT / n for n in names if (Path(n).suffix in TEXT_SUFFIXES or Path(n).name in TEXT_NAMES)
            and (ROOT / n).is_file()]  # not a tracked file deleted in the working tree


def lines_of(path: Path) -> list[tuple[str, int, str]]:
    """(where, line number, text): a notebook's lines per cell, so an offender can be named by cell."""
    text = path.read_text(errors="ignore")
    if path.suffix != ".ipynb":
        return [("", i, line) for i, line in enumerate(text.splitlines(), 1)]
    cells = json.loads(text)["cells"]
    return [(f"cell {c}", i, line) for c, cell in enumerate(cells)
            for i, line in enumerate("".join(cell["source"]).splitlines(), 1)]


def history_in(line: str) -> list[str]:
    upstream = [m.span() for m in UPSTREAM.finditer(line)]
    return [m.group(0) for m in HISTORY.finditer(line)
            if not any(a <= m.start() < b for a, b in upstream)]


def offenders(path: Path) -> list[str]:
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [f"{rel}:{where + ' ' if where else ''}line {n}: {found} | {line.strip()[:120]}"
            for where, n, line in lines_of(path) for found in history_in(line)]


def test_no_development_history_in_tracked_text():
    found = [o for p in tracked_text_files() for o in offenders(p)]
    assert not found, ("development history in the product (say what is, not how it came to be; "
                       "history lives in git):\n" + "\n".join(found))


def test_a_planted_issue_number_is_found(tmp_path):
    planted = tmp_path / "planted.md"
    planted.write_text("A fine sentence.\nThis was fixed in " + "issue" + " 12, see the notes.\n")
    assert [o.split(": ", 1)[1].split(" |")[0] for o in offenders(planted)] == ["issue" + " 12"]
    notebook = tmp_path / "planted.ipynb"
    code = {"cell_type": "code", "source": ["x = 1\n", "# as in " + "run" + " 7\n"]}
    notebook.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": ["# Title\n"]}, code]}))
    assert [o.split(": ")[0] for o in offenders(notebook)] == [f"{notebook}:cell 1 line 2"]


def test_what_counts_as_history_and_what_does_not():
    # written in pieces so that this file holds no history itself
    for history in ["fixed in " + "issue" + " 12", "(" + "issue" + " 12, item 8)", "see " + "#" + "12",
                    "(" + "run" + " 3)", "Run" + " 8 on one machine", "runs" + " 1-6",
                    "as of " + "commit" + " 7d1f9a7", "the worker " + "used to" + " raise here",
                    "pre" + "viously the kit", "no spec " + "any" + "more", "the flag was " + "renamed",
                    "now " + "fixed", "(~300 MB, " + "until" + " checkpoint/io.py gave the writer a queue)",
                    "the kit " + "no longer" + " needs it", "(a 1.4B GPT: ~13 s per check " + "bef" + "ore)"]:
        assert history_in(history), history
    for fine in ["Megatron-LM issue #1589", "upstream fix PR #6839, open", "edgecolor='#333333'",
                 "color:#666", "DP=2 ranks run 2 each", "a 200-iteration run at global batch 64",
                 "runs of 4 iterations", "the run directory", "refused before start", "2 s before the import",
                 "heads and groups no longer divide", "a file's SHA-256 no longer matches", "the scale used to cast",
                 "the bf16 input as before", "wait until rank 0 gave up"]:
        assert not history_in(fine), fine
