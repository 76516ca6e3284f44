"""Worker side, checkpoints: io.py (save/load through Megatron's dist_checkpointing), policy.py
(when: periodic saves, resume, eval-only), megatron_0_19.py (the distributed-optimizer workarounds
Megatron-Core 0.19.2 needs on torch's Adam)."""
