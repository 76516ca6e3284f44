"""Python processes in which some installed packages are absent, as in an environment that never
installed them: a sitecustomize module on PYTHONPATH (Python runs it at start) wraps every finder on
sys.meta_path so that a hidden top-level name is found by none of them. `import papermill` then
fails as it does where papermill is not installed ("No module named 'papermill'") and
`importlib.util.find_spec` returns None, in that process and in every Python process it starts
(torchrun's workers too). Their metadata stays readable; nothing here asks for it.

Which names: `only_in_extra("test")`, the top-level modules of every distribution that
`pip install '.[test]'` brings and `pip install .` does not, read from the installed packages'
metadata (their declared requirements, with markers) and pyproject.toml; the packages of
[tool.megatron-kit] install-without-deps count without their declared requirements, as the Makefile
installs them."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
NAME = canonicalize_name(PROJECT["project"]["name"])

SITECUSTOMIZE = '''
import os, sys

HIDDEN = set(os.environ["KIT_HIDDEN_PACKAGES"].split(","))


class Hiding:
    def __init__(self, inner):
        self.inner = inner

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN or not hasattr(self.inner, "find_spec"):
            return None
        return self.inner.find_spec(name, path, target)

    def __getattr__(self, name):
        return getattr(self.inner, name)


sys.meta_path[:] = [Hiding(finder) for finder in sys.meta_path]
'''


def requirement_closure(requirements: list[str]) -> set[str]:
    """Every distribution `pip install` of `requirements` would bring (canonical names), this project's own
    extras included."""
    extras = PROJECT["project"]["optional-dependencies"]
    no_deps = {canonicalize_name(Requirement(r).name) for r in PROJECT["tool"]["megatron-kit"]["install-without-deps"]}
    found, seen, todo = set(), set(), [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name == NAME:
            todo += [Requirement(r) for extra in sorted(req.extras) for r in extras[extra]]
            continue
        if (name, frozenset(req.extras)) in seen:
            continue
        seen.add((name, frozenset(req.extras)))
        found.add(name)
        if name in no_deps:
            continue
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:  # optional on this platform, or not a need of this machine
            continue
        for r in map(Requirement, requires):
            if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in (req.extras or {""})):
                todo.append(r)
    return found


def top_level_modules(distribution: str) -> set[str]:
    dist = metadata.distribution(distribution)
    listed = dist.read_text("top_level.txt")
    if listed:
        return set(listed.split())
    names = set()
    for f in dist.files or []:
        first = f.parts[0]
        if first.endswith((".dist-info", ".data")) or first in ("..", "__pycache__"):
            continue
        names.add(first[:-3] if len(f.parts) == 1 and first.endswith(".py") else first)
    return {n for n in names if n.isidentifier()}


def only_in_extra(extra: str) -> set[str]:
    """Top-level module names of what `pip install '.[extra]'` adds to `pip install .`."""
    base = [*PROJECT["project"]["dependencies"], *PROJECT["tool"]["megatron-kit"]["install-without-deps"]]
    added = requirement_closure([*base, f"{NAME}[{extra}]"]) - requirement_closure(base)
    return set().union(*(top_level_modules(d) for d in added))


def run(args: list[str], hidden: set[str], folder: Path, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """`args` (a command; "python" is this interpreter) with `hidden` absent; `folder` holds the
    sitecustomize module."""
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {**os.environ, "KIT_HIDDEN_PACKAGES": ",".join(sorted(hidden)), "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    args = [sys.executable if a == "python" else a for a in args]
    return subprocess.run(args, cwd=kw.pop("cwd", ROOT), env={**env, **kw.pop("env", {})}, capture_output=True,
                          text=True, timeout=timeout, **kw)
