"""Where the kit bends Megatron-Core to run where it was not written for, each patch named for
what it fixes and active only where needed:
  cpu.py            Megatron-Core on CPU with gloo (CUDA calls redirected; activated only on CPU)
  megatron_0_19.py  the distributed optimizer on torch's Adam in megatron-core 0.19.2 (checkpoints)"""
