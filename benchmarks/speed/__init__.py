"""Speed: the kit against a bare Megatron-Core loop, bf16 against FP8, the parts of a step, launch time."""
