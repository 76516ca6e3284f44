"""Inside torchrun only: the Megatron-Core worker. The loop sits at the root, each file one of its
steps, in the order Megatron-LM's examples/run_simple_mcore_train_loop.py has them:
  train.py       entry point (main, run) and the training loop (train)
  worker.py      what the loop hands its steps: Rank (fixed for the rank's life), Built, Trainee
  setup.py       process groups (torch.distributed + parallel_state), seeds
  preflight.py   multi-node: every node sees the same files before anything loads
  build.py       the model provider: TransformerConfig, GPT chunks, DDP, optimizer, lr scheduler
  step.py        forward step, loss function, the call into Megatron's schedule
  evaluation.py  fixed-batch loss, validation and test passes
Folders, each one concern:
  layers/        the kit's modules where the local backend lacks Transformer Engine's (specs, norm,
                 attention incl. context-parallel, MLA, FP8 linears, rotary, Mamba)
  hf/            Hugging Face models through Megatron-Bridge (import, weights, parity, TE stand-in)
  data/          synthetic tokens, real text as Megatron indexed datasets, SFT, microbatches
  checkpoint/    save, load, reshard, resume (Megatron's dist_checkpointing)
  measure/       what the kit records around the loop: the Observer, report card, instruments
  compat/        Megatron-Core on CPU, and the Megatron-Core 0.19 workarounds
Imports job/, rundir/, precision/ and errors only from the kit (the heavy imports go through
job/import_phase.py)."""
