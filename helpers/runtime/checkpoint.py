"""Checkpoints through Megatron's `dist_checkpointing` (strategy torch_dist).

The *seed checkpoint* is the kit's way to give every layout the same starting weights: a
world-size-1 job builds the model once and saves it; every layout loads it and
`dist_checkpointing` cuts out the shard each rank owns (TP slices, PP stages, EP experts)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch
from megatron.core import dist_checkpointing

from helpers.runtime.build import unwrap

MARKER = "kit_complete"  # written last: a folder without it is an interrupted save


def save_model(chunks: list[torch.nn.Module], path: Path) -> None:
    """Save the model alone (one chunk: used at world size 1 for the seed checkpoint)."""
    path = Path(path)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    assert len(chunks) == 1, "seed checkpoints are written at world size 1 without VPP"
    dist_checkpointing.save({"model0": unwrap(chunks[0]).sharded_state_dict()}, str(tmp))
    (tmp / MARKER).write_text("ok\n")
    if path.exists():  # another job finished the same seed checkpoint first: keep theirs
        shutil.rmtree(tmp)
    else:
        tmp.rename(path)


def load_model(chunks: list[torch.nn.Module], path: Path) -> None:
    """Load model weights into every chunk this rank holds; resharding does the splitting.
    All chunks load in one call (sharded keys carry global layer and expert numbers, so the
    saved single-chunk model and several virtual-stage chunks name the same tensors), because
    dist_checkpointing checks that each load covers every saved tensor once."""
    path = Path(path)
    if not (path / MARKER).exists():
        raise FileNotFoundError(f"checkpoint {path} is missing or incomplete (no {MARKER} file)")
    modules = [unwrap(c) for c in chunks]
    request = {f"model{i}": m.sharded_state_dict() for i, m in enumerate(modules)}
    state = dist_checkpointing.load(request, str(path))
    for i, m in enumerate(modules):
        m.load_state_dict(state[f"model{i}"], strict=True)
