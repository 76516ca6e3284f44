"""Worker side, measuring: instruments.py (the one object train.py calls), comm_log.py (every
torch.distributed call Megatron makes), timeline.py (forward/backward per microbatch and chunk),
clock.py (their stamps: CUDA events on GPU, settled once per iteration), moe_stats.py (tokens per
expert, aux loss), memory_stats.py (static bytes per rank, device peaks), torch_profile.py
(KIT_TORCH_PROFILE), linear_tensors.py (KIT_CAPTURE_TENSORS). KIT_INSTRUMENT=0 turns comm/timeline
recording off."""
