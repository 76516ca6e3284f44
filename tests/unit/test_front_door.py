"""The front door stays small and true: the README reads in five minutes (at most 250 lines), every
repository path it and the pages it sends readers to (docs/, data/README.md) name in backticks
exists, and so does every path the code's comments and docstrings name; benchmarks/README.md
indexes every benchmark script, and measured results live in docs/results/ (pages) or beside the
benchmark that wrote them (raw files): no results file elsewhere under docs/.

The code's prose is every comment and docstring (`tokenize`, `ast`) under helpers/, tests/,
benchmarks/, site/ and notebooks/ (markdown cells and code comments), and every comment of launch/,
.ci/, the Makefile, pyproject.toml and environment.yml.
What it names, and where that is looked for (`resolves`):
  - a path with a slash and a file suffix (`helpers/job/spec.py`, `runtime/hf/config.py`), or a
    repository folder (`helpers/job/rules/`): relative to the repository root, to helpers/ or one
    of its two sides (helpers/job/, helpers/runtime/), or to the folder of the file naming it or any
    folder above that one (`rules/hf.py` is helpers/job/rules/hf.py, `layers/norm.py` is
    helpers/runtime/layers/norm.py, `attention/<name>.py` named in helpers/runtime/layers/specs.py is
    in helpers/runtime/layers/attention/);
  - a bare module file (`weights.py`): some file of the repository (tracked, or new and not ignored)
    has that name;
  - either of them inside Megatron (`megatron/core/jit.py`, or the tail of a path there:
    `tensor_parallel/mappings.py`, `mla_qk_norm_config.py`): the installed `megatron` package has it;
  - a dotted kit name (`helpers.launch.runner.run`): the module exists and defines the name
    (read with `ast`, not imported).
Not looked for: placeholders (a folder in capitals such as `RUN_DIR/`, or `<`, `*`, `{`, `$`), the
user's own script (`my_*.py`), and the Megatron-LM repository's files its wheel does not ship
(MEGATRON_LM). History words in the same prose are tests/unit/test_no_history.py's (it reads every
line of every tracked file)."""
import ast
import functools
import importlib.util
import io
import json
import re
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FRONT_PAGES = ["README.md", "benchmarks/README.md", "site/README.md", "data/README.md",
               *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").glob("*.md"))),
               *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs" / "results").glob("*.md")))]
FOLDERS = ("helpers/", "notebooks/", "tests/", "docs/", "benchmarks/", "launch/", "data/", "site/")
CODE = ("helpers/", "tests/", "benchmarks/", "launch/", "site/", "notebooks/", ".ci/", "Makefile", "pyproject.toml",
        "environment.yml")
BASES = ("", "helpers/", "helpers/job/", "helpers/runtime/")  # the kit, and its two sides
MEGATRON_LM = {"examples/run_simple_mcore_train_loop.py", "tools/preprocess_data.py", "preprocess_data.py",
               "pretrain_gpt.py", "gpt_builders.py", "model_provider.py", "pretrain_hybrid.py"}
SUFFIXES = "py|md|ipynb|json|toml|sh|sbatch|mjs|yml|yaml|txt|cfg|j2|css|html"
NOT_AFTER = r"(?<![\w./$<{~-])"
PATH = re.compile(NOT_AFTER + rf"((?:[\w.-]+/)+[\w.-]+\.(?:{SUFFIXES}))(?![\w/-])")
FOLDER = re.compile(NOT_AFTER + r"((?:helpers|tests|benchmarks|launch|site|notebooks|docs)/(?:[\w-]+/)*)"
                    r"(?![\w.-]*[\w/])")  # a folder named alone, not the start of a longer path
MODULE_FILE = re.compile(NOT_AFTER + r"([A-Za-z_]\w*\.py)(?![\w/-])")
DOTTED = re.compile(r"(?<![\w.])(helpers(?:\.[A-Za-z_]\w*)+)")
PLACEHOLDER = re.compile(r"(?:^|/)[A-Z][A-Z0-9_]*/|[<>*{}$]|(?:^|/)my_\w*\.py$")
BUILT = ("site/html", "runs/", "tests/.executed")


def test_the_readme_reads_in_five_minutes():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: reference text to docs/, numbers to docs/results/"


def names_a_file(path: str, beside: Path) -> bool:
    """A page's backticked path: a file or folder, `module.name` of a file, or a lesson without .ipynb."""
    return any((base / path).exists() or (base / (path + ".ipynb")).exists()
               or (base / (path.rpartition(".")[0] + ".py")).exists()
               for base in (ROOT, ROOT / "helpers", beside))


def test_every_path_the_front_pages_name_exists():
    missing = []
    for page in FRONT_PAGES:
        for token in re.findall(r"`([^`\n]+)`", (ROOT / page).read_text()):
            path = token.split()[0].rstrip(",.:;)").split("::")[0]
            built = path.startswith(BUILT)  # outputs a command makes (make site), ignored by git
            if path.startswith(FOLDERS) and not any(c in path for c in "*<>{}$") and not built \
                    and not names_a_file(path, (ROOT / page).parent):
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


def tracked(*folders: str) -> list[str]:
    names = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *folders], cwd=ROOT,
                           capture_output=True, text=True).stdout.split()  # files git would add count too
    names = names or [str(p.relative_to(ROOT)) for f in folders for p in (ROOT / f).rglob("*")]
    return [n for n in names if (ROOT / n).is_file()]  # not a tracked file deleted in the working tree


def python_prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of Python source."""
    found = []
    try:
        found += [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
                  if t.type == tokenize.COMMENT]
        tree = ast.parse(source)
    except (SyntaxError, tokenize.TokenError):
        return found
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and ast.get_docstring(node, clean=False) is not None:
            doc = node.body[0]
            found += [(doc.lineno + i, line) for i, line in enumerate(doc.value.value.splitlines())]
    return sorted(found)


def prose(name: str, text: str) -> list[tuple[str, str]]:
    """(where, text) of each line of the comments and docstrings of `text`, the file `name`."""
    if name.endswith(".py"):
        return [(f"{name}:{n}", line) for n, line in python_prose(text)]
    if name.endswith(".ipynb"):
        found = []
        for c, cell in enumerate(json.loads(text)["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] == "markdown":
                found += [(f"{name}:cell {c} line {n}", line) for n, line in enumerate(source.splitlines(), 1)]
            elif cell["cell_type"] == "code":  # IPython's %magic and !shell lines are not Python
                plain = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
                found += [(f"{name}:cell {c} line {n}", line) for n, line in python_prose(plain)]
        return found
    hash_comment = r"(?:^|\s)#(?!!)"  # not a #! line
    marker = {".mjs": r"(?<![:\w\"'])//", **dict.fromkeys((".sh", ".sbatch", ".toml", ".yml", ".yaml", ""),
                                                          hash_comment)}.get(Path(name).suffix)  # "": Makefile
    if marker is None:  # not code (pages, pictures, results, templates)
        return []
    return [(f"{name}:{n}", line[m.start():]) for n, line in enumerate(text.splitlines(), 1)
            if (m := re.search(marker, line))]


@functools.lru_cache(maxsize=1)
def megatron_files() -> tuple[str, ...]:
    """megatron/... path of every file of the installed Megatron-Core and Megatron-Bridge."""
    spec = importlib.util.find_spec("megatron.core")
    package = Path(spec.origin).parents[1] if spec else None
    if package is None:
        return ()
    return tuple("megatron/" + p.relative_to(package).as_posix() for p in package.rglob("*.py"))


@functools.lru_cache(maxsize=1)
def tracked_file_names() -> frozenset[str]:
    return frozenset(Path(n).name for n in tracked("."))


def defines(module: Path, name: str) -> bool:
    """`name` is defined at the top of `module` (a def, class, assignment or import), or the module
    answers it lazily (a `__getattr__` and `name` as one of its strings)."""
    tree = ast.parse(module.read_text())
    lazy = False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            lazy |= node.name == "__getattr__"
            if node.name == name:
                return True
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and \
                any((a.asname or a.name.split(".")[0]) == name for a in node.names):
            return True
    return lazy and any(isinstance(n, ast.Constant) and n.value == name for n in ast.walk(tree))


def dotted_resolves(name: str) -> bool:
    parts, here = name.split("."), ROOT / "helpers"
    for i, part in enumerate(parts[1:], 1):
        if (here / part).is_dir():
            here = here / part
        elif (here / f"{part}.py").is_file():
            here = here / f"{part}.py"
        else:
            module = here / "__init__.py" if here.is_dir() else here
            return module.is_file() and defines(module, part)
    return True


def resolves(token: str, named_in: str) -> bool:
    """Whether a path or file name from the prose of `named_in` exists (the module docstring's rules)."""
    if token.startswith("helpers.") and "/" not in token and not token.endswith(".py"):
        return dotted_resolves(token)
    if "/" not in token:
        return token in tracked_file_names() or any(f.endswith("/" + token) for f in megatron_files())
    if token.startswith("megatron/"):
        return token in megatron_files()
    folders = [ROOT / base for base in BASES] + [f for f in (ROOT / named_in).parents if f.is_relative_to(ROOT)]
    if any((folder / token).exists() for folder in folders):
        return True
    return token.endswith(".py") and any(f.endswith("/" + token) for f in megatron_files())


def named_paths(text: str) -> list[str]:
    found = [m.group(1) for pattern in (PATH, FOLDER, MODULE_FILE, DOTTED) for m in pattern.finditer(text)]
    return [t for t in found if t not in MEGATRON_LM and not PLACEHOLDER.search(t) and not t.startswith(BUILT)]


def missing_in(name: str, text: str | None = None) -> list[str]:
    text = (ROOT / name).read_text(errors="ignore") if text is None else text
    return [f"{where}: {token} | {line.strip()[:100]}" for where, line in prose(name, text)
            for token in named_paths(line) if not resolves(token, name)]


def test_every_path_the_code_comments_and_docstrings_name_exists():
    missing = [m for name in tracked(*CODE) for m in missing_in(name)]
    assert not missing, ("comments and docstrings name paths that do not exist (say where the thing is "
                         "now; resolution rules in this file's docstring):\n" + "\n".join(missing))


def test_a_stale_path_in_a_comment_is_found():
    source = ('"""See rules/hf.py and helpers/job/old_rules.py."""\n'
              "x = 'helpers/job/also_gone.py'  # a string is code, this comment names runtime/gone.py\n"
              "# helpers.job.spec.JobSpec exists, helpers.job.spec.Nothing does not; RUN_DIR/spec.json\n")
    found = [m.split(" |")[0] for m in missing_in("helpers/job/planted.py", source)]  # as if it were there
    assert found == ["helpers/job/planted.py:1: helpers/job/old_rules.py", "helpers/job/planted.py:2: runtime/gone.py",
                     "helpers/job/planted.py:3: helpers.job.spec.Nothing"], found
    notebook = json.dumps({"cells": [{"cell_type": "markdown", "source": ["Read `helpers/gone.py`.\n"]},
                                     {"cell_type": "code", "source": ["x = 'a/b.py'\n", "y = 2  # tests/gone.py\n"]}]})
    found = [m.split(" |")[0] for m in missing_in("notebooks/planted.ipynb", notebook)]
    assert found == ["notebooks/planted.ipynb:cell 0 line 1: helpers/gone.py",
                     "notebooks/planted.ipynb:cell 1 line 2: tests/gone.py"], found
    script = "#!/bin/bash\necho a/b.py  # see launch/gone.sh\n"
    found = [m.split(" |")[0] for m in missing_in("launch/planted.sh", script)]
    assert found == ["launch/planted.sh:2: launch/gone.sh"], found
