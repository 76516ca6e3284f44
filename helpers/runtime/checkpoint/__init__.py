"""Worker side, checkpoints: io.py (save/load through Megatron's dist_checkpointing, resharding
into any layout), policy.py (when: periodic saves, resume, eval-only). Checkpoint folders as files
(latest, verify, describe): helpers/job/checkpoint_dir.py; the Megatron-Core 0.19 optimizer
workarounds: helpers/runtime/compat/megatron_0_19.py."""
