"""Worker side, measuring: instruments.py (the one object train.py calls), comm_log.py (every
torch.distributed call Megatron makes), timeline.py (forward/backward per microbatch and chunk),
moe_stats.py (tokens per expert, aux loss), memory_stats.py (static bytes per rank, device peaks).
KIT_INSTRUMENT=0 turns comm/timeline recording off."""
