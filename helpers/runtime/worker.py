"""Worker: one rank's job, made once and handed to every step of the loop (instead of the same
spec, run directory, model, optimizer, model description, heartbeat, device and DP rank passed to
each function): what it runs, where it writes, who it is, and, once built, Megatron's pieces."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from helpers.job.models import ModelPreset
from helpers.job.spec import JobSpec
from helpers.rundir.writer import Heartbeat

if TYPE_CHECKING:  # torch is imported by train.main inside import_phase.without_gc(), not here
    import torch


@dataclass
class Worker:
    spec: JobSpec  # spec.json: every auto already decided by the runner
    run_dir: Path
    rank: int  # global rank (torchrun's RANK)
    beat: Heartbeat  # how far this rank got (logs/rank<N>.heartbeat.json)
    device: torch.device | None = None  # set by setup.process_groups
    data: object | None = None  # real data tokenized on this node (data/indexed.Prepared); None: synthetic
    splits: dict | None = None  # Megatron datasets per split (train, valid, test); None: synthetic
    model_desc: ModelPreset | None = None  # the architecture in the kit's terms (model.json: a preset or an HF config)
    hf: dict | None = None  # model.json's record of the HF folder imported (architectures, tensor spellings)
    config: object | None = None  # Megatron's TransformerConfig (a Bridge provider for an HF import)
    model: list | None = None  # the DDP-wrapped GPTModel chunks, one per virtual pipeline stage
    opt: object | None = None  # Megatron's optimizer (get_megatron_optimizer)
    param_gather: object | None = None  # build.ParamGather: when the updated weights reach every replica
    faults: object | None = None  # spec.faults' hooks on this rank (measure/faults.Injected); None: none

    @property
    def dp_rank(self) -> int:
        from megatron.core import parallel_state as ps
        return ps.get_data_parallel_rank()

    def path(self, value: str) -> Path:
        """A spec path as this node names it ($VARS expanded: node-local folders differ per node)."""
        import os
        return Path(os.path.expandvars(value))
