"""Mamba-2 on Megatron-Core's local backend without the `mamba_ssm` kernels: the SSD math in pure
torch (`ssd.py`), the mixer that uses it (`mixer.py`) and the hybrid stack spec (`stack.py`)."""
