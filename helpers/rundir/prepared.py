"""What the runner worked out before start besides the spec (helpers/job/rules/resolve.py), written
next to spec.json for the workers to read instead of working it out again (file names: names.py):

  model.json  {"models": [{"model": preset fields, "hf": the HF folder's record or null}, ...]}: the
              job's model as the rules checked it (a preset, or an HF folder's description) and, for
              an HF import, the folder's record (config.json's SHA-256, the architectures, the tensor
              spellings Megatron-Bridge is told; helpers/job/hf_model.Folder.record). An HF parity
              job adds one entry per other folder its layouts name.
  data.json   the data source as pinned: the Source and every file's path, size and SHA-256
              (helpers/job/data/pinned.py); absent for synthetic data.
Plain Python: the notebook side writes these, every rank reads them."""
from __future__ import annotations

import json
from pathlib import Path

from helpers.job import models
from helpers.job.data.pinned import Pinned
from helpers.job.models import ModelPreset
from helpers.rundir import names


def write_model(run_dir: Path, built: list[tuple[ModelPreset, dict | None]]) -> None:
    """model.json: (model, HF record or None) of every model the job builds, the job's own first."""
    (Path(run_dir) / names.MODEL).write_text(json.dumps(
        {"models": [{"model": m.to_dict(), "hf": hf} for m, hf in built]}, indent=2))


def write_data(run_dir: Path, pinned: Pinned | None) -> None:
    if pinned is not None:
        (Path(run_dir) / names.DATA).write_text(json.dumps(pinned.to_dict(), indent=2))


def model(run_dir: Path, hf_model: str | None = None) -> tuple[ModelPreset, dict | None]:
    """The model to build and its HF record: the entry of the HF folder `hf_model`, else the job's."""
    built = json.loads((Path(run_dir) / names.MODEL).read_text())["models"]
    if hf_model is None:
        entry = built[0]
    else:
        entry = next((e for e in built if e["hf"] and e["hf"]["path"] == hf_model), None)
        if entry is None:
            raise ValueError(f"{Path(run_dir) / names.MODEL} holds no model of the HF folder {hf_model}: the run "
                             "directory was not prepared for it; prepare the job again")
    return models.from_dict(entry["model"]), entry["hf"]


def data(run_dir: Path) -> Pinned | None:
    """The pinned data source; None for synthetic data."""
    path = Path(run_dir) / names.DATA
    return Pinned.from_dict(json.loads(path.read_text())) if path.exists() else None
