"""A GPU as the advisor's callers name it (`--gpu`, `--plan-on`): a profile's key
(helpers/perf/gpus.py PROFILES), or the path of a JSON file holding GpuProfile's fields, a user's
own GPU (`python -m helpers.advisor --list-gpus --json` prints examples)."""
from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

from helpers.perf.gpus import PROFILES, GpuProfile

REQUIRED = {"name", "peak_bf16_tflops", "memory_gib", "hbm_gb_per_s", "intra_node_gb_per_s", "inter_node_gb_per_s",
            "source"}
OPTIONAL = {f.name for f in fields(GpuProfile)} - REQUIRED


def load(path: str | Path) -> GpuProfile:
    """A user's GPU from a JSON file holding GpuProfile's fields (`--list-gpus --json` prints examples)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read the GPU profile {path}: {err}. Write a JSON object with the fields "
                         f"{', '.join(sorted(REQUIRED))}") from None
    if not isinstance(data, dict):
        raise ValueError(f"GPU profile {path}: a JSON object with the fields {', '.join(sorted(REQUIRED))}")
    known = {f.name for f in fields(GpuProfile)}
    missing, extra = sorted(REQUIRED - set(data)), sorted(set(data) - known)
    if missing or extra:
        raise ValueError(f"GPU profile {path}: " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(extra)}"] if extra else []))
            + f". Its fields are {', '.join(sorted(REQUIRED))} (and optionally {', '.join(sorted(OPTIONAL))})")
    profile = GpuProfile(**data)
    bad = [name for name in known - {"name", "source"} if not (getattr(profile, name) is None and name not in REQUIRED)
           and not (isinstance(getattr(profile, name), (int, float)) and getattr(profile, name) > 0)]
    if bad:
        raise ValueError(f"GPU profile {path}: {', '.join(sorted(bad))} must be positive numbers")
    if not isinstance(profile.nvlink_domain, int) or isinstance(profile.nvlink_domain, bool):
        raise ValueError(f"GPU profile {path}: nvlink_domain must be a whole number of GPUs, not "
                         f"{profile.nvlink_domain!r}")
    return profile


def resolve(name_or_path: str) -> GpuProfile:
    """A profile by its key (PROFILES) or a JSON file's path."""
    if name_or_path in PROFILES:
        return PROFILES[name_or_path]
    if Path(name_or_path).suffix == ".json" or Path(name_or_path).exists():
        return load(name_or_path)
    raise ValueError(f"unknown GPU {name_or_path!r}; known: {', '.join(PROFILES)}, or a JSON file with the fields "
                     f"{', '.join(sorted(REQUIRED))}")
