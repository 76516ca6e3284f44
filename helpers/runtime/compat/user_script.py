"""Runs a learner's own torchrun script on every rank, as torchrun would run it, with the kit's
CPU compatibility applied first when there is no GPU (compat/cpu.py: Megatron-Core's CUDA
assumptions redirected to the CPU), so a script written for GPUs trains on a laptop with gloo.

    python -m helpers.runtime.compat.user_script SCRIPT [ARGS...]   (torchrun runs this per rank;
    helpers.launch.script.run_script starts it)"""
from __future__ import annotations

import runpy
import sys

import torch


def main() -> None:
    script, args = sys.argv[1], sys.argv[2:]
    if not torch.cuda.is_available():
        from helpers.runtime.compat import cpu as cpu_compat
        cpu_compat.import_megatron_eagerly()
        cpu_compat.activate()
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
