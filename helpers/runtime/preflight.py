"""Multi-node preflight: before anything is loaded, every node checks that it sees the same
dataset, tokenizer and checkpoint files as node 0 (relative path, size and SHA-256). A file
that is missing or different on one node would otherwise surface much later, as a hang in a
collective load or as silently different data. One process per node (LOCAL_RANK 0) reads the
files; the inventories meet in one all_gather, so every rank raises the same error, early."""
from __future__ import annotations

import os
from pathlib import Path

import torch.distributed as dist

from helpers.errors import PreflightError
from helpers.job import checkpoint_dir, paths
from helpers.runtime.data.node import node_label


def _watched(spec) -> dict[str, Path]:
    """label -> path of the files this job will read, as this node names them."""
    out = {}
    if spec.seed_checkpoint and spec.seed_checkpoint_dir:
        out["seed checkpoint"] = Path(os.path.expandvars(spec.seed_checkpoint_dir))
    for i, path in enumerate(spec.load_paths()):
        out[f"checkpoint {i}" if i else "checkpoint"] = path
    if paths.data_dir() is not None:
        out["data (KIT_DATA_DIR)"] = paths.data_dir()
    for i, extra in enumerate(filter(None, os.environ.get("KIT_PREFLIGHT_FILES", "").split(os.pathsep))):
        out[f"file {i}"] = Path(os.path.expandvars(extra))
    return out


def _inventory(label: str, path: Path) -> dict:
    if label.startswith("checkpoint") and path.is_dir() and (path / checkpoint_dir.TRACKER).is_file():
        # a checkpoint root: the tracker and the checkpoint it names (not older iter_* folders)
        target = checkpoint_dir.latest(path)
        files = {checkpoint_dir.TRACKER: checkpoint_dir.inventory(path / checkpoint_dir.TRACKER)[checkpoint_dir.TRACKER]}
        if target.is_dir():
            files.update({f"{target.name}/{k}": v for k, v in checkpoint_dir.inventory(target).items()})
        return files
    return checkpoint_dir.inventory(path) if path.exists() else {}


def node_view(spec) -> dict:
    return {"node": int(os.environ.get("GROUP_RANK", 0)), "host": node_label()[1],
            "files": {label: {"path": str(p), "files": _inventory(label, p)} for label, p in _watched(spec).items()}}


def compare(views: list[dict]) -> list[str]:
    """Differences of every node's view against node 0's, one line each."""
    ref = min(views, key=lambda v: v["node"])
    problems = []
    for view in views:
        if view is ref:
            continue
        who = f"node {view['node']} ({view['host']})"
        for label, want in ref["files"].items():
            have = view["files"].get(label, {"path": "?", "files": {}})
            for name, meta in want["files"].items():
                got = have["files"].get(name)
                where = f"{label} file {name} (under {have['path']})"
                if got is None:
                    problems.append(f"{who}: {where} is missing")
                elif got["bytes"] != meta["bytes"]:
                    problems.append(f"{who}: {where} has {got['bytes']} bytes, node 0 has {meta['bytes']}")
                elif got["sha256"] != meta["sha256"]:
                    problems.append(f"{who}: {where} differs from node 0's (SHA-256)")
            for name in sorted(set(have["files"]) - set(want["files"])):
                problems.append(f"{who}: {label} file {name} (under {have['path']}) is not on node 0")
    return problems


def _advice(problems: list[str]) -> str:
    if any(" checkpoint file " in p and "is missing" in p for p in problems):
        return ("The checkpoint directory is node-local: each node holds only the shards its own ranks "
                "wrote, and only node 0 has the tracker and the checkpoint's index (.metadata). Megatron's "
                "torch_dist loader needs every rank to read the whole index and, after any layout change, "
                "shards written on other nodes, so this resume cannot work as the folders are. Fix: gather "
                "them first with helpers.job.checkpoint_dir.consolidate([node 0's folder, node 1's, ...]) "
                "(after copying each node's iter_* folder where one process can read them, e.g. with rsync), "
                "or save to a file system every node mounts.")
    return ("Fix: copy the same files to every node (or use a shared file system), then start again.")


def check(spec, beat) -> None:
    """Collective. No-op on a single node (all ranks read the same files)."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size()))
    if local == dist.get_world_size():
        return
    beat("preflight: comparing files across nodes")
    mine = node_view(spec) if int(os.environ.get("LOCAL_RANK", 0)) == 0 else None
    views = [None] * dist.get_world_size()
    dist.all_gather_object(views, mine)
    problems = compare([v for v in views if v is not None])
    if problems:
        shown = "\n  ".join(problems[:8]) + (f"\n  ... and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise PreflightError(f"preflight failed: the nodes do not see the same files:\n  {shown}\n{_advice(problems)}")
    beat("preflight: every node sees the same files")
