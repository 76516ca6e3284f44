"""Worker side, checkpoints: io.py (save/load through Megatron's dist_checkpointing, resharding
into any layout), policy.py (when: periodic saves, resume, eval-only), megatron_args.py (the `args`
Megatron-LM keeps in the common state), bridge_files.py (Megatron-Bridge's run_config.yaml and
train_state.pt). Checkpoint folders as files (trackers, verify, describe):
helpers/job/checkpoint_dir.py; the Megatron-Core 0.19 optimizer workarounds:
helpers/runtime/compat/megatron_0_19.py."""
