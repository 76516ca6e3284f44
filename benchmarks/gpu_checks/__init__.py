"""GPU checks: layouts, CP/EP, HF import and the memory planner on real GPUs (NCCL, bf16)."""
