"""The front door stays small and true: the README reads in five minutes (at most 250 lines), every
repository path it and the pages it sends readers to name in backticks exists, benchmarks/README.md
indexes every benchmark script, and measured results live in docs/results/ (pages) or beside the
benchmark that wrote them (raw files): no results file elsewhere under docs/."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FRONT_PAGES = ["README.md", "benchmarks/README.md", "site/README.md", "docs/jobs.md",
               *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs" / "results").glob("*.md")))]
FOLDERS = ("helpers/", "notebooks/", "tests/", "docs/", "benchmarks/", "launch/", "data/", "site/")


def test_the_readme_reads_in_five_minutes():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: reference text to docs/, numbers to docs/results/"


BUILT = ("site/html", "runs/", "tests/.executed")


def test_every_path_the_front_pages_name_exists():
    missing = []
    for page in FRONT_PAGES:
        for token in re.findall(r"`([^`\n]+)`", (ROOT / page).read_text()):
            path = token.split()[0].rstrip(",.:;)").split("::")[0]
            exists = (ROOT / path).exists() or (ROOT / page).parent.joinpath(path).exists()  # or beside the page
            built = path.startswith(BUILT)  # outputs a command makes (make site), ignored by git
            if path.startswith(FOLDERS) and not any(c in path for c in "*<>{}$") and not exists and not built:
                missing.append(f"{page}: {path}")
    assert not missing, missing


def test_the_benchmark_index_names_every_script():
    index = (ROOT / "benchmarks" / "README.md").read_text()
    scripts = [str(p.relative_to(ROOT / "benchmarks")) for p in sorted((ROOT / "benchmarks").rglob("*.py"))
               if p.name != "__init__.py"]
    assert scripts and not [s for s in scripts if f"`{s}`" not in index]


def test_results_files_live_beside_their_benchmark_or_in_docs_results():
    stray = [str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.json") if "results" not in p.parent.parts]
    assert not stray, f"results files under docs/ outside docs/results/: {stray} (put them beside the benchmark)"
