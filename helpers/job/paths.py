"""Where the kit keeps things. The repo root is found from this file, so notebooks (whose
working directory is notebooks/) and the command line share one runs/ folder."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # helpers/job/paths.py -> the repository


def runs_dir() -> Path:
    return Path(os.environ.get("KIT_RUNS_DIR", REPO_ROOT / "runs"))


def cache_dir() -> Path:
    """Seed checkpoints and other reusable artefacts (safe to delete)."""
    return Path(os.environ.get("KIT_CACHE_DIR", REPO_ROOT / ".cache"))


def data_dir() -> Path | None:
    """Local data (WikiText, tokenizers) when KIT_DATA_DIR points at it; None otherwise."""
    value = os.environ.get("KIT_DATA_DIR")
    return Path(value) if value else None


def data_file(*parts: str) -> Path | None:
    """The file KIT_DATA_DIR/<parts> when KIT_DATA_DIR is set and the file is there; None otherwise."""
    root = data_dir()
    path = root.joinpath(*parts) if root else None
    return path if path and path.exists() else None


def sha256(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB blocks (data, tokenizer and checkpoint identity checks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
