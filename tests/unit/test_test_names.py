"""`make test` collects tests/unit and tests/jobs in one pytest session with rootdir-relative module
names (no __init__.py), so two test files with the same basename stop collection with "import file
mismatch" before any test runs. `make check` collects tests/unit alone and would never see it."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_file_has_a_unique_basename():
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        if ".executed" in path.parts or "__pycache__" in path.parts:
            continue
        by_name[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not clashes, f"test files sharing a basename (rename one): {clashes}"
