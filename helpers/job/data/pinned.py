"""A data source pinned before any process starts (helpers/job/rules/resolve.py): the Source and,
for every file the workers will read, its path, size and SHA-256, each file hashed once. The run
directory carries it (data.json); the workers read it instead of resolving the source again, check
each file's size before they use the node's tokenized cache and its hash only when they tokenize it
(helpers/runtime/data/indexed.py), so a cache entry always holds the pinned bytes."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from helpers.errors import DataNotFound, PreflightError
from helpers.job import paths
from helpers.job.data.source import Source

INDEXED_FILES = (".bin", ".idx")  # what an indexed dataset's prefix names


@dataclass(frozen=True)
class Pinned:
    source: Source
    files: dict = field(default_factory=dict)  # role (an indexed dataset: .bin, .idx) -> {path, bytes, sha256}

    def sha256(self) -> dict[str, str]:
        return {role: f["sha256"] for role, f in self.files.items()}

    def verify(self, hashes: bool = False) -> None:
        """Every pinned file is there with its pinned size (and, with `hashes`, its pinned bytes);
        DataNotFound or PreflightError naming the file and what to do otherwise."""
        for role, f in self.files.items():
            path = Path(f["path"])
            if not path.is_file():
                raise DataNotFound(f"data file {path} ({role}) is gone since the job was prepared; restore it, or "
                                   "prepare the job again")
            size = path.stat().st_size
            if size != f["bytes"] or (hashes and paths.sha256(path) != f["sha256"]):
                what = f"{size} bytes, pinned {f['bytes']}" if size != f["bytes"] else "other bytes than pinned (SHA-256)"
                raise PreflightError(f"data file {path} ({role}) changed since the job was prepared ({what}); "
                                     "restore the file, or prepare the job again to train on what it holds now")

    def to_dict(self) -> dict:
        return {"source": self.source.to_dict(), "files": self.files}

    @classmethod
    def from_dict(cls, d: dict) -> "Pinned":
        return cls(Source.from_dict(d["source"]), d["files"])


def files_of(src: Source) -> dict[str, Path]:
    """The files a source's workers read, by role (an indexed dataset: its .bin and .idx)."""
    if src.kind == "indexed":
        return {ext: Path(src.files["prefix"] + ext) for ext in INDEXED_FILES}
    return {role: Path(p) for role, p in src.files.items()}


def pin(src: Source) -> Pinned:
    """`src` with every file's size and SHA-256 (one streamed pass per file); DataNotFound when a
    file cannot be read."""
    files = {}
    for role, path in files_of(src).items():
        try:
            files[role] = {"path": str(path), "bytes": path.stat().st_size, "sha256": paths.sha256(path)}
        except OSError as e:
            raise DataNotFound(f"data file {path}: cannot be read ({e.strerror or e}); check its permissions, or "
                               "point data at another source") from None
    return Pinned(src, files)
