"""The package layout, enforced. Three rules are import-linter contracts in .importlinter, which
`lint-imports` checks (`make check` runs it; the first test here runs it, so `make test` does too):
  1. a module outside views/ imports matplotlib or ipywidgets;
  2. runtime/ imports launch/, views/ or memory/, directly or through another module (the worker
     stays light and one-way);
  3. the packages of helpers/ import each other in a cycle.
(A fourth contract keeps pyproject.toml's test extra out of the kit: tests/unit/test_install_without_test_extras.py.)
(A fifth keeps perf/, the performance model under memory/ and advisor/, off launch/, views/ and runtime/.)
import-linter has no contract for the other three, checked here:
  4. job/ or rundir/ imports torch or megatron at module level (both sides import them; inside a
     function is allowed, and import-linter counts an import wherever it stands), read with `ast`;
  5. a module imports another module's _private name, or reads one as module._name (import-linter's
     private_modules contract is about modules named _x, not names), read with `ast`;
  6. two modules import each other, directly or through others: on grimp's import graph, the one
     import-linter builds (its acyclic_siblings contract, at every depth, would also refuse cycles
     between a package's subpackages and modules, e.g. job/rules/ and job/hf_names.py, which the
     kit has).
Imports inside functions count for rules 1-3 and 6: they are dependencies too. Each rule is also
shown to fire on a tiny synthetic package, so the tests can fail."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = {"torch", "megatron"}
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")  # import-linter's command, in the venv


def lint_imports(cwd: Path, config: Path, contract: str | None = None) -> subprocess.CompletedProcess:
    """`lint-imports` on `config`, run in `cwd` (where the root package is found), no cache written."""
    args = [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(config)] + (["--contract", contract] if contract else [])
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})


def modules(package_dir: Path) -> dict[str, Path]:
    """{dotted module name: file} under package_dir (its folder name is the top package)."""
    out = {}
    for f in sorted(package_dir.rglob("*.py")):
        parts = list(f.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def imports(path: Path, name: str, is_package: bool):
    """(imported module, imported names, at module level?, node) for every import in a file."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, [], id(node) in top, node
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod == "__future__":
                continue
            yield mod, [a.name for a in node.names], id(node) in top, node


def violations(package_dir: Path) -> list[str]:
    """Rules 4 and 5 (read with `ast`) and 6 (grimp's graph) on the package in package_dir."""
    known = modules(package_dir)
    top = package_dir.name
    found = []
    for name, path in known.items():
        sub = name.split(".")[1] if name.count(".") >= 1 else ""
        is_package = path.name == "__init__.py"
        bound = {}  # local name -> kit module, for the module._private check
        for mod, names, at_top, node in imports(path, name, is_package):
            where = f"{path.relative_to(package_dir.parent)}:{node.lineno}"
            root = mod.split(".")[0]
            if sub in ("job", "rundir") and at_top and root in HEAVY:
                found.append(f"heavy import at module level in {sub}/: {where} imports {mod}")
            if root != top:
                continue
            for n in names:
                if n.startswith("_") and not n.startswith("__") and f"{mod}.{n}" not in known:
                    found.append(f"private name imported: {where} takes {n} from {mod}")
            if isinstance(node, ast.Import):
                for a in node.names:
                    bound[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            else:
                for a in node.names:
                    if f"{mod}.{a.name}" in known:
                        bound[a.asname or a.name] = f"{mod}.{a.name}"
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"private name used: {path.relative_to(package_dir.parent)}:{node.lineno} reads "
                             f"{node.value.id}.{node.attr}")
    return found + module_cycles(package_dir)


def module_cycles(package_dir: Path) -> list[str]:
    """Every import a -> b whose b leads back to a, as the cycle's modules (rule 6)."""
    sys.path.insert(0, str(package_dir.parent))  # grimp finds the package the way Python would
    try:
        graph = grimp.build_graph(package_dir.name, cache_dir=None)
    finally:
        sys.path.remove(str(package_dir.parent))
    cycles = set()
    for a in graph.modules:
        for b in graph.find_modules_directly_imported_by(a):
            back = graph.find_shortest_chain(importer=b, imported=a)
            if back:
                cycles.add(tuple(sorted((a,) + back)))
    return [f"import cycle between modules: {' -> '.join(c)}" for c in sorted(cycles)]


def test_the_kit_keeps_its_import_linter_contracts():
    result = lint_imports(ROOT, ROOT / ".importlinter")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_kit_follows_the_rules_import_linter_has_no_contract_for():
    assert violations(ROOT / "helpers") == []


def test_only_the_three_files_at_the_top_of_helpers():
    files = sorted(p.name for p in (ROOT / "helpers").iterdir() if p.is_file() and p.suffix == ".py")
    assert files == ["__init__.py", "__main__.py", "errors.py"]


# the loop's steps, and the imports a forkserver makes once for every rank it forks (beside the worker
# they import, so nothing below runtime/'s root imports upwards)
LOOP = ["__init__.py", "build.py", "evaluation.py", "preflight.py", "rank_imports.py", "rank_imports_hf.py",
        "setup.py", "step.py", "train.py", "worker.py"]


def test_the_worker_root_holds_only_the_loop():
    """runtime/'s root is the training loop, one file per step; everything else lives in a folder
    named for what it is (layers/, hf/, data/, checkpoint/, measure/, compat/)."""
    files = sorted(p.name for p in (ROOT / "helpers" / "runtime").iterdir() if p.is_file() and p.suffix == ".py")
    assert files == LOOP
    folders = sorted(p.name for p in (ROOT / "helpers" / "runtime").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == ["checkpoint", "compat", "data", "hf", "layers", "measure"]


# ---- each rule fires on a synthetic package ---------------------------------------------------
def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "kit"
    for rel, text in {"__init__.py": "", "job/__init__.py": "", "rundir/__init__.py": "", "runtime/__init__.py": "",
                      "views/__init__.py": "", "launch/__init__.py": "", "memory/__init__.py": "", "perf/__init__.py": "",
                      **files}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


@pytest.mark.parametrize("files, contract", [
    ({"launch/run.py": "import matplotlib.pyplot as plt\n"}, "drawing-in-views"),
    ({"views/plot.py": "import matplotlib.pyplot as plt\nimport ipywidgets\n"}, None),
    ({"views/lab/__init__.py": "", "views/lab/panel.py": "import ipywidgets\n"}, None),
    ({"runtime/train.py": "from kit.launch import run\n", "launch/run.py": ""}, "worker-one-way"),
    ({"runtime/train.py": "def f():\n    from kit.memory import plan\n", "memory/plan.py": ""}, "worker-one-way"),
    ({"runtime/train.py": "from kit.job import spec\n", "job/spec.py": "def f():\n    from kit.views import plot\n",
      "views/plot.py": ""}, "worker-one-way"),  # through job/: the worker would still load the notebook side
    ({"job/a.py": "from kit.rundir import b\n", "rundir/b.py": "x = 1\n", "rundir/c.py": "from kit.job import a\n"},
     "no-package-cycles"),
    ({"job/a.py": "from kit.rundir import b\n", "rundir/b.py": "x = 1\n"}, None),
    # the contracts reach into nested packages (job/rules/, runtime/layers/, ...)
    ({"runtime/layers/__init__.py": "", "runtime/layers/norm.py": "from kit.views import plot\n",
      "views/plot.py": ""}, "worker-one-way"),
    ({"job/rules/__init__.py": "", "job/rules/a.py": "from kit.rundir import b\n",
      "rundir/b.py": "from kit.job import c\n", "job/c.py": "x = 1\n"}, "no-package-cycles"),
    ({"perf/links.py": "def f():\n    from kit.views import plot\n", "views/plot.py": ""}, "perf-under-the-notebook-side"),
    # inside a package: a lower module that imports back up (the worker's measure/ importing its loop), even
    # from inside a function (the rules importing the Layout whose validate runs them)
    ({"runtime/measure/__init__.py": "", "runtime/measure/gather.py": "from kit.runtime import train\n",
      "runtime/train.py": "from kit.runtime.measure import gather\n"}, "no-package-cycles"),
    ({"job/rules/__init__.py": "def check():\n    from kit.job import layout\n",
      "job/layout.py": "from kit.job.rules import sizes\n", "job/rules/sizes.py": ""}, "no-package-cycles"),
    ({"runtime/measure/__init__.py": "", "runtime/measure/gather.py": "x = 1\n",
      "runtime/train.py": "from kit.runtime.measure import gather\n"}, None),
], ids=["drawing", "drawing-in-views-ok", "drawing-in-views-nested-ok", "runtime-launch", "runtime-memory-in-function",
        "runtime-views-through-job", "package-cycle", "one-way-ok", "nested-runtime-views", "nested-package-cycle",
        "perf-views", "runtime-climbs-up", "rules-layout-in-function", "runtime-one-way-ok"])
def test_each_contract_fires_on_a_synthetic_package(tmp_path, files, contract):
    """The kit's own .importlinter, with `helpers` renamed to the synthetic package's name."""
    _package(tmp_path, files)
    config = tmp_path / ".importlinter"
    config.write_text((ROOT / ".importlinter").read_text().replace("helpers", "kit"))
    if contract is None:
        result = lint_imports(tmp_path, config)
        assert result.returncode == 0, result.stdout + result.stderr
    else:
        result = lint_imports(tmp_path, config, contract)
        assert result.returncode == 1 and "BROKEN" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("files, expected", [
    ({"job/spec.py": "import torch\n"}, "heavy import at module level in job/"),
    ({"rundir/names.py": "from megatron.core import parallel_state\n"}, "heavy import at module level in rundir/"),
    ({"job/spec.py": "def f():\n    import torch\n"}, None),
    ({"launch/a.py": "def _hidden(): pass\n", "launch/b.py": "from kit.launch.a import _hidden\n"},
     "private name imported"),
    ({"launch/a.py": "def _hidden(): pass\n", "launch/b.py": "from kit.launch import a\na._hidden()\n"},
     "private name used"),
    ({"job/a.py": "from kit.job import b\n", "job/b.py": "def f():\n    from kit.job import a\n"},
     "import cycle between modules"),
    ({"job/a.py": "from kit.job import b\n", "job/b.py": "from kit.job import c\n", "job/c.py": "import kit.job.a\n"},
     "import cycle between modules"),
    ({"job/a.py": "from kit.job import b\n", "job/b.py": "x = 1\n"}, None),
    ({"job/rules/__init__.py": "", "job/rules/precision.py": "import torch\n"}, "heavy import at module level in job/"),
], ids=["torch-in-job", "megatron-in-rundir", "torch-in-function-ok", "private-import", "private-attribute",
        "module-cycle", "module-cycle-of-three", "module-one-way-ok", "nested-job-torch"])
def test_each_rule_here_fires_on_a_synthetic_package(tmp_path, files, expected):
    found = violations(_package(tmp_path, files))
    if expected is None:
        assert found == []
    else:
        assert any(f.startswith(expected) for f in found), found
