"""The lessons' text stays true to the code: every notebook has one number and opens with what it
assumes; the quickstart's map lists exactly the notebooks that exist; every backticked name in the
markdown (a JobSpec field, a rule, a kit function, a Megatron option) exists in the kit or in
Megatron-Core (or, for the import lesson,
Megatron-Bridge and transformers), and every backticked repository path exists."""
import importlib.util
import json
import re
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(\(\))?$")


REPO_FOLDERS = ("helpers/", "notebooks/", "tests/", "docs/", "benchmarks/", "launch/", "data/")


def cells(nb_path: Path, kind: str) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(nb_path.read_text())["cells"] if c["cell_type"] == kind]


def markdown(nb_path: Path) -> list[str]:
    return cells(nb_path, "markdown")


@lru_cache(maxsize=None)
def words_of(folder: Path) -> frozenset[str]:
    words = set()
    for f in folder.rglob("*.py"):
        words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", f.read_text(errors="ignore")))
    return frozenset(words)


def test_every_notebook_has_its_own_number_and_opens_with_its_prerequisites():
    numbers = [p.name[:2] for p in NOTEBOOKS]
    assert len(numbers) == len(set(numbers)), f"two notebooks share a number: {numbers}"
    for p in NOTEBOOKS:
        first = markdown(p)[0]
        assert first.startswith(f"# {p.name[:2]} · "), f"{p.name}: its title must start with '# {p.name[:2]} · '"
        assert "**Assumes:**" in first.split("\n\n", 2)[1], f"{p.name}: the first paragraph must say what it assumes"


def test_the_quickstart_map_lists_every_notebook():
    text = next(m for m in markdown(ROOT / "notebooks" / "00_quickstart.ipynb") if m.startswith("## Map of"))
    listed = re.findall(r"^\| (\d\d) ", text, flags=re.M)
    assert listed == [p.name[:2] for p in NOTEBOOKS], (listed, [p.name for p in NOTEBOOKS])


def test_backticked_names_and_paths_exist():
    known = words_of(ROOT / "helpers") | words_of(Path(importlib.util.find_spec("megatron.core").origin).parent)
    for package in ("megatron.bridge", "transformers"):  # Hugging Face names (k_proj, ...) in the import lesson
        if importlib.util.find_spec(package.split(".")[0]) and importlib.util.find_spec(package):
            known |= words_of(Path(importlib.util.find_spec(package).origin).parent)
    missing = []
    for p in NOTEBOOKS:
        own = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", "\n".join(cells(p, "code"))))  # e.g. its parameters
        for text in markdown(p):
            for token in re.findall(r"`([^`\n]+)`", text):
                if token.startswith(REPO_FOLDERS):  # a file or folder of this repository
                    path = token.split("<")[0].rstrip("/").split(":")[0]
                    if not (ROOT / path).exists():
                        missing.append(f"{p.name}: path `{token}`")
                elif IDENTIFIER.match(token) and "_" in token:
                    names = token.rstrip("()").split(".")
                    if not all(n in known or n in own for n in names):
                        missing.append(f"{p.name}: name `{token}`")
    assert not missing, "names in the lessons that exist neither in the kit nor in Megatron-Core:\n" + "\n".join(missing)


SEED = re.compile(r"(?i)(?<!random )\bseed(s|'s)?\b(?!\s+checkpoint)")


def bare_seeds(text: str) -> list[str]:
    """'seed' in prose that is neither a seed checkpoint nor a random seed (code in backticks aside):
    the word once meant two things, so the lessons always say which."""
    prose = re.sub(r"`[^`]*`", "", text)
    return [prose[max(0, m.start() - 40):m.end() + 20] for m in SEED.finditer(prose)]


def test_seed_always_says_which_seed():
    found = []
    for p in NOTEBOOKS:
        for text in markdown(p):
            if not text.startswith("## Words this kit uses"):  # the glossary defines the word
                found += [f"{p.name}: ...{s}..." for s in bare_seeds(text)]
    assert not found, "say 'seed checkpoint' or 'random seed':\n" + "\n".join(found)
    glossary = [t for t in markdown(ROOT / "notebooks" / "00_quickstart.ipynb") if t.startswith("## Words")]
    assert glossary and "**seed checkpoint**" in glossary[0] and "**random seed**" in glossary[0]


def test_the_seed_rule_catches_a_bare_seed():
    assert bare_seeds("the seed's 5D layout") and bare_seeds("as the seed ran it")
    assert not bare_seeds("the seed checkpoint, a random seed, `seed=1`, and the seed\ncheckpoint")
