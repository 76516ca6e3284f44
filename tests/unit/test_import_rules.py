"""The package layout, enforced: read every module of helpers/ with `ast` (nothing is imported)
and fail when
  1. a module outside views/ imports matplotlib or ipywidgets;
  2. runtime/ imports launch/, views/ or memory/ (the worker stays light and one-way);
  3. job/ or rundir/ imports torch or megatron at module level (both sides import them);
  4. a module imports another module's _private name, or reads one as module._name;
  5. the import graph has a cycle, between modules or between packages (imports inside
     functions count: they are dependencies too).
Each rule is also shown to fire on a tiny synthetic package, so the test can fail."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DRAWING = {"matplotlib", "ipywidgets"}
HEAVY = {"torch", "megatron"}


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


def _kit_target(mod: str, names: list[str], known: dict) -> list[str]:
    """The kit modules an import statement depends on (a `from pkg import submodule` names it)."""
    out = []
    for n in names or [None]:
        if n and f"{mod}.{n}" in known:
            out.append(f"{mod}.{n}")
        elif mod in known:
            out.append(mod)
    return out


def _cycles(graph: dict[str, set]) -> list[list[str]]:
    """Every strongly connected component with more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def violations(package_dir: Path) -> list[str]:
    known = modules(package_dir)
    top = package_dir.name
    found, graph = [], {m: set() for m in known}
    for name, path in known.items():
        sub = name.split(".")[1] if name.count(".") >= 1 else ""
        is_package = path.name == "__init__.py"
        bound = {}  # local name -> kit module, for the module._private check
        for mod, names, at_top, node in imports(path, name, is_package):
            where = f"{path.relative_to(package_dir.parent)}:{node.lineno}"
            root = mod.split(".")[0]
            if root in DRAWING and sub != "views":
                found.append(f"drawing outside views: {where} imports {mod}")
            if sub == "runtime" and root == top and mod.split(".")[1:2] and mod.split(".")[1] in ("launch", "views", "memory"):
                found.append(f"runtime imports the notebook side: {where} imports {mod}")
            if sub in ("job", "rundir") and at_top and root in HEAVY:
                found.append(f"heavy import at module level in {sub}/: {where} imports {mod}")
            if root != top:
                continue
            for n in names:
                if n.startswith("_") and not n.startswith("__") and f"{mod}.{n}" not in known:
                    found.append(f"private name imported: {where} takes {n} from {mod}")
            targets = _kit_target(mod, names, known)
            graph[name].update(t for t in targets if t != name)
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
    for comp in _cycles(graph):
        found.append("import cycle between modules: " + " -> ".join(comp))
    packages = {}
    for a, deps in graph.items():
        pa = a.split(".")[1] if "." in a else top
        for b in deps:
            pb = b.split(".")[1] if "." in b else top
            if pa != pb and pa != top and pb != top:
                packages.setdefault(pa, set()).add(pb)
    for comp in _cycles(packages):
        found.append("import cycle between packages: " + " -> ".join(comp))
    return found


def test_the_kit_follows_its_import_rules():
    assert violations(ROOT / "helpers") == []


def test_only_the_three_files_at_the_top_of_helpers():
    files = sorted(p.name for p in (ROOT / "helpers").iterdir() if p.is_file() and p.suffix == ".py")
    assert files == ["__init__.py", "__main__.py", "errors.py"]


LOOP = ["__init__.py", "build.py", "evaluation.py", "preflight.py", "setup.py", "step.py", "train.py", "worker.py"]


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
                      "views/__init__.py": "", "launch/__init__.py": "", "memory/__init__.py": "", **files}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


@pytest.mark.parametrize("files, expected", [
    ({"launch/run.py": "import matplotlib.pyplot as plt\n"}, "drawing outside views"),
    ({"views/plot.py": "import matplotlib.pyplot as plt\n"}, None),
    ({"runtime/train.py": "from kit.launch import run\n"}, "runtime imports the notebook side"),
    ({"runtime/train.py": "def f():\n    from kit.memory import plan\n"}, "runtime imports the notebook side"),
    ({"job/spec.py": "import torch\n"}, "heavy import at module level in job/"),
    ({"rundir/names.py": "from megatron.core import parallel_state\n"}, "heavy import at module level in rundir/"),
    ({"job/spec.py": "def f():\n    import torch\n"}, None),
    ({"launch/a.py": "def _hidden(): pass\n", "launch/b.py": "from kit.launch.a import _hidden\n"},
     "private name imported"),
    ({"launch/a.py": "def _hidden(): pass\n", "launch/b.py": "from kit.launch import a\na._hidden()\n"},
     "private name used"),
    ({"job/a.py": "from kit.job import b\n", "job/b.py": "def f():\n    from kit.job import a\n"},
     "import cycle between modules"),
    ({"job/a.py": "from kit.rundir import b\n", "rundir/b.py": "x = 1\n", "rundir/c.py": "from kit.job import a\n"},
     "import cycle between packages"),
    ({"job/a.py": "from kit.rundir import b\n", "rundir/b.py": "x = 1\n"}, None),
    # the same rules reach into nested packages (job/rules/, runtime/layers/, ...)
    ({"runtime/layers/__init__.py": "", "runtime/layers/norm.py": "from kit.views import plot\n"},
     "runtime imports the notebook side"),
    ({"job/rules/__init__.py": "", "job/rules/precision.py": "import torch\n"}, "heavy import at module level in job/"),
    ({"job/rules/__init__.py": "", "job/rules/a.py": "from kit.rundir import b\n",
      "rundir/b.py": "from kit.job import c\n", "job/c.py": "x = 1\n"}, "import cycle between packages"),
], ids=["drawing", "drawing-in-views-ok", "runtime-launch", "runtime-memory-in-function", "torch-in-job",
        "megatron-in-rundir", "torch-in-function-ok", "private-import", "private-attribute", "module-cycle",
        "package-cycle", "one-way-ok", "nested-runtime-launch", "nested-job-torch", "nested-package-cycle"])
def test_each_rule_fires_on_a_synthetic_package(tmp_path, files, expected):
    found = violations(_package(tmp_path, files))
    if expected is None:
        assert found == []
    else:
        assert any(f.startswith(expected) for f in found), found
