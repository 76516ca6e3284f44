"""`pip install .` without extras is enough for the kit: its packages import and the advisor plans, in
a process where everything pyproject.toml's test extra would add (pytest, papermill, import-linter,
nvidia-modelopt and what they alone bring) is absent (tests/hidden_packages.py). The same holds for
its imports read statically: .importlinter's test-tools-stay-out contract, shown here to fire."""
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests import hidden_packages

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
KIT = ["helpers", "helpers.launch", "helpers.launch.runner", "helpers.launch.cli", "helpers.advisor",
       "helpers.memory", "helpers.views", "helpers.lessons.cli", "helpers.lessons.runner"]
TEST_TOOLS = {"pytest", "_pytest", "xdist", "papermill", "importlinter", "modelopt"}


def test_the_test_tools_are_extras_not_dependencies():
    names = {re.split(r"[<>=!~ \[]", r, maxsplit=1)[0].lower() for r in PROJECT["dependencies"]}
    assert not names & {"pytest", "pytest-xdist", "papermill", "import-linter", "nvidia-modelopt"}, names
    extras = PROJECT["optional-dependencies"]
    assert extras["lessons"] == ["papermill"] and "megatron-kit[lessons]" in extras["test"]
    assert TEST_TOOLS <= hidden_packages.only_in_extra("test")  # what the tests below hide
    assert "papermill" in hidden_packages.only_in_extra("lessons") and \
        "pytest" not in hidden_packages.only_in_extra("lessons")


def test_the_kit_imports_without_the_test_extra(tmp_path):
    probe = (f"import {', '.join(KIT)}\n"
             "try:\n    import pytest\nexcept ModuleNotFoundError as e:\n    print(e)\n"
             "import importlib.util, sys\n"
             "print(sorted(m for m in sys.modules if m.partition('.')[0] in {'pytest', 'papermill', 'modelopt'}))\n"
             "print(importlib.util.find_spec('papermill'))")
    out = hidden_packages.run(["python", "-c", probe], hidden_packages.only_in_extra("test"), tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == ["No module named 'pytest'", "[]", "None"], out.stdout


def test_the_advisor_plans_without_the_test_extra(tmp_path):
    hidden = hidden_packages.only_in_extra("test")
    usage = hidden_packages.run(["python", "-m", "helpers.advisor", "--help"], hidden, tmp_path)
    assert usage.returncode == 0 and "--model" in usage.stdout, usage.stderr[-3000:]
    advise = ["--model", "llama3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "4096", "--global-batch", "64"]
    out = hidden_packages.run(["python", "-m", "helpers.advisor", *advise, "--top", "1"], hidden, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"^\s+1\s+TP\d+ PP\d+ DP\d+", out.stdout, re.M) and "layouts the rules accept" in out.stdout, \
        out.stdout


def test_the_contract_refuses_a_test_tool_outside_lessons(tmp_path):
    """.importlinter on a synthetic package `kit`: a view importing pytest breaks it, lessons/ importing
    papermill (inside a function too) does not."""
    def lint(files: dict[str, str]) -> subprocess.CompletedProcess:
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        for rel, text in {"__init__.py": "", "views/__init__.py": "", "lessons/__init__.py": "",
                          "lessons/child.py": "def main():\n    import papermill\n", **files}.items():
            (folder / "kit" / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / "kit" / rel).write_text(text)
        (folder / ".importlinter").write_text((ROOT / ".importlinter").read_text().replace("helpers", "kit"))
        return subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache", "--contract",
                               "test-tools-stay-out", str(folder / ".importlinter")], cwd=folder,
                              capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    kept = lint({})
    assert kept.returncode == 0 and "KEPT" in kept.stdout, kept.stdout + kept.stderr
    for files in ({"views/check.py": "import pytest\n"}, {"views/lab.py": "def f():\n    import papermill\n"},
                  {"views/conv.py": "from modelopt.torch import opt\n"}):
        broken = lint(files)
        assert broken.returncode == 1 and "BROKEN" in broken.stdout, (files, broken.stdout + broken.stderr)
