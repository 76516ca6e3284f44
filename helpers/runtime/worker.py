"""What the worker's loop hands from step to step, each made once and never changed, as Megatron-LM's
loop passes its model, optimizer and data iterators as arguments:

  Rank      fixed for the rank's life, made once its process groups exist (train.run)
  Built     what the model provider returns: the model's description, config and unwrapped chunks
  Trainee   what wrap_for_training returns: the same model wrapped in DDP, its optimizer and when
            its updated weights reach every replica

The data (data/indexed.Prepared and Megatron's datasets per split) and the injected faults
(measure/faults.Injected) are returned by their own functions and passed where they are used."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from helpers.job.models import ModelPreset
from helpers.job.spec import JobSpec
from helpers.rundir.writer import Heartbeat

if TYPE_CHECKING:  # torch and Megatron-Core are imported by train.main inside import_phase.without_gc(), not here
    import torch
    from megatron.core.transformer import TransformerConfig

    from helpers.runtime.build import ParamGather


@dataclass(frozen=True)
class Rank:
    spec: JobSpec  # spec.json: every auto already decided by the runner
    run_dir: Path
    global_rank: int  # torchrun's RANK
    beat: Heartbeat  # how far this rank got (logs/rank<N>.heartbeat.json)
    device: torch.device  # setup.process_groups'

    @property
    def dp_rank(self) -> int:
        from megatron.core import parallel_state as ps
        return ps.get_data_parallel_rank()

    def path(self, value: str) -> Path:
        """A spec path as this node names it ($VARS expanded: node-local folders differ per node)."""
        return Path(os.path.expandvars(value))


@dataclass(frozen=True)
class Built:
    model_desc: ModelPreset  # the architecture in the kit's terms (model.json: a preset or an HF config)
    hf: dict | None  # model.json's record of the HF folder imported (architectures, tensor spellings); None: a preset
    config: TransformerConfig  # Megatron's (a Bridge provider for an HF import)
    chunks: list  # this rank's GPTModel chunks, one per virtual pipeline stage, not yet wrapped


@dataclass(frozen=True)
class Trainee:
    model_desc: ModelPreset
    hf: dict | None
    config: TransformerConfig  # with the hooks Megatron's schedule calls (build.loop_hooks)
    model: list  # the DDP-wrapped chunks
    optimizer: object  # Megatron's (get_megatron_optimizer)
    param_gather: ParamGather  # overlap_param_gather: when the updated weights reach every replica
