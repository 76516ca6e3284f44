"""What a job is and what it reads, as plain data that both sides import (no torch, no Megatron at
import time):
  sizes.py          ParallelSizes: the one copy of the parallel sizes and what derives from them
  spec.py           JobSpec: everything a run needs (one doc line per field)
  layout.py         Layout: sizes on nodes, validation, rank grids
  rules/            every check before a process starts, one entry (resolve, check)
  models.py         model presets                hf_model.py       a Hugging Face folder's config.json
  data/             what a job trains on: sources, formats, tokenizers, chat examples
  checkpoint_dir.py checkpoint folders on disk   paths.py          where the kit keeps things
  flops.py          training FLOPs per token     import_phase.py   heavy imports, collector paused
  faults.py         failures a job injects on purpose (JobSpec.faults): kinds and KIND@ITERATION[:rankN]
  megatron_names.py each field's names in Megatron-Core, Megatron-LM and Megatron-Bridge, conversions both ways
(import_phase is here, where both sides may import it: the ranks' and torchrun's imports.)"""
