"""Megatron-LM's own training script and Megatron-Bridge's training loop against the kit's job, through each
other's checkpoints (roundtrip.py)."""
