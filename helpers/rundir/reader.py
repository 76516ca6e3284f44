"""Reading a run directory: `RunDir(path)` gives the spec, metrics, groups, ranks, errors and
heartbeats that the workers wrote (file names: helpers/rundir/names.py). Notebook side; no torch."""
from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

from helpers.job import models
from helpers.job.models import ModelPreset
from helpers.job.spec import JobSpec
from helpers.rundir import names


class RunDir:
    def __init__(self, path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def _json(self, name: str):
        p = self.path / name
        return json.loads(p.read_text()) if p.exists() else None

    @cached_property
    def spec(self) -> JobSpec:
        return JobSpec.read(self.path / names.SPEC)

    @property
    def manifest(self) -> dict:
        return self._json(names.MANIFEST)

    @cached_property
    def model(self) -> ModelPreset:
        """The model this run trained, as checked before it started (a preset or an HF folder's description)."""
        return models.from_dict(self.manifest["model"])

    @property
    def metrics(self) -> list[dict]:
        p = self.path / names.METRICS
        if not p.exists():
            return []
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]

    @property
    def losses(self) -> list[float]:
        return [m["loss"] for m in self.metrics]

    @property
    def final_loss(self) -> float | None:
        losses = self.losses
        return losses[-1] if losses else None

    @property
    def report(self) -> dict | None:
        """report.json: the smoke-test contract (written by helpers/runtime/measure/report_card.py; drawn by
        helpers.views.report_card)."""
        return self._json(names.REPORT)

    @property
    def evaluations(self) -> list[dict]:
        """validation.jsonl: {"split": "valid"|"test", "iteration", "loss"} per pass (real data only)."""
        p = self.path / names.VALIDATION
        return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []

    @property
    def megatron(self) -> dict | None:
        """What the job asked of Megatron-Core (megatron.json): initialize_model_parallel's arguments,
        the non-default fields of TransformerConfig, DDP and optimizer configs, the schedule, and
        per rank the module tree. `megatron_flags.flags(run.megatron)` gives Megatron-LM's flags."""
        return self._json(names.MEGATRON)

    @property
    def groups(self) -> dict[int, dict]:
        """{rank: {axis: [ranks]}} as the live job's parallel_state reported them."""
        return {int(r): g for r, g in (self._json(names.GROUPS) or {}).items()}

    @property
    def ranks(self) -> dict[int, dict]:
        """{rank: host, device, parameter/gradient/optimizer bytes} read from the live job."""
        return {int(r): v for r, v in (self._json(names.RANKS) or {}).items()}

    @property
    def errors(self) -> dict[int, dict]:
        out = {}
        for p in sorted((self.path / names.LOGS).glob("rank*.error.json")):
            e = json.loads(p.read_text())
            out[e["rank"]] = e
        return out

    @property
    def heartbeats(self) -> dict[int, dict]:
        """{rank: last phase reached} (see helpers.rundir.writer.Heartbeat)."""
        out = {}
        for p in (self.path / names.LOGS).glob("rank*.heartbeat.json"):
            try:
                out[int(p.name[4:].split(".")[0])] = json.loads(p.read_text())
            except (ValueError, json.JSONDecodeError):
                continue
        return out

    def stalled_ranks(self) -> list[int]:
        """Ranks furthest behind (never started, or fewest heartbeat steps)."""
        beats = self.heartbeats
        steps = {r: beats.get(r, {}).get("step", 0) for r in range(self.spec.world_size)}
        if len(set(steps.values())) <= 1:
            return sorted(steps)
        low = min(steps.values())
        return sorted(r for r, s in steps.items() if s == low)

    def log_tail(self, rank: int, lines: int = 15) -> str:
        p = self.path / names.rank_log(rank)
        if not p.exists():
            return "(no log)"
        return "\n".join(p.read_text(errors="replace").splitlines()[-lines:])
