"""Real GEMM operands for the precision lesson and benchmark: with JobSpec.capture_tensors_at=N, rank 0
keeps, at iteration N, the input activation, the output gradient and the weight of every linear
of its first transformer layer (first microbatch) and writes them to RUN_DIR/linear_tensors.pt
as {linear name: {"input", "grad_output", "weight"}} (bf16/fp32 as trained, on the CPU; at most
MAX_ROWS tokens per activation, enough to measure a recipe's error and small enough to keep).
Off (the default): nothing is installed."""
from __future__ import annotations

from pathlib import Path

import torch

from helpers.rundir import names

MAX_ROWS = 2048


class LinearTensors:
    def __init__(self, model: list, iteration: int, rank: int):
        from megatron.core.tensor_parallel.layers import (
            ColumnParallelLinear,
            RowParallelLinear,
        )

        self.iteration, self.current, self.rank, self.found = iteration, 0, rank, {}
        chunk = model[0]
        layers = [m for name, m in chunk.named_modules() if name.endswith("decoder.layers.0")]
        if rank != 0 or not layers:
            return
        for name, module in layers[0].named_modules():
            if isinstance(module, (ColumnParallelLinear, RowParallelLinear)):
                module.register_forward_hook(self._hook(name))

    def _hook(self, name: str):
        def keep(module, args, output):
            if self.current != self.iteration or name in self.found or not torch.is_grad_enabled():
                return
            rows = lambda t: t.detach().reshape(-1, t.shape[-1])[:MAX_ROWS].cpu()  # noqa: E731
            record = self.found[name] = {"input": rows(args[0]), "weight": module.weight.detach().cpu()}
            out = output[0] if isinstance(output, tuple) else output
            if out.requires_grad:
                out.register_hook(lambda g: record.__setitem__("grad_output", rows(g)))
        return keep

    def write(self, run_dir: Path) -> None:
        if self.rank == 0 and self.found:
            torch.save(self.found, Path(run_dir) / names.LINEAR_TENSORS)


def install(model: list, rank: int, iteration: int | None) -> LinearTensors | None:
    return LinearTensors(model, iteration, rank) if iteration is not None else None
