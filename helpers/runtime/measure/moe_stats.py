"""What the MoE routers decided, per rank, layer and iteration: tokens sent to each expert and the
load-balancing (aux) loss. Worker side only; the notebook reads `moe.jsonl` (helpers.views.moe).

Tokens per expert: a forward hook on every Megatron `TopKRouter` sums its `routing_map`
([local tokens, experts], True where a token goes to an expert) over the tokens this rank routes
(with SP/CP: its slice of the sequence). Summing the rows of all ranks that hold one layer gives the
global histogram: every token of the global batch, top-k times.

Aux loss: Megatron's router records it itself, in `get_moe_metrics_tracker()` (one value per layer,
accumulated over the microbatches; each TP*CP rank holds a partial that Megatron's own report sums
over TP*CP and averages over DP). We copy the raw values and clear the tracker each iteration, as
Megatron's training loop does when it reports.

    stats = moe_stats.RouterLog(model, enabled)   # no-op for dense models, or not enabled (JobSpec.instruments)
    stats.begin(it); ...; stats.end()       # around each iteration's forward/backward
    stats.finish(run_dir)                   # collective: moe.jsonl on rank 0
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist

from helpers.rundir import names
from helpers.runtime.measure.gather import gather_to_rank0


class RouterLog:
    def __init__(self, model: list, enabled: bool):
        from megatron.core.transformer.moe.router import TopKRouter

        self.rank = dist.get_rank()
        self.rows: list[dict] = []
        self._counts: dict[int, torch.Tensor] = {}
        self._iteration = None
        # off: no hook (on GPU each router's counts are a copy to the host, a wait per microbatch)
        self.routers = [m for chunk in model for m in chunk.modules() if isinstance(m, TopKRouter)] if enabled else []
        for router in self.routers:
            router.register_forward_hook(self._hook)

    def _hook(self, router, inputs, output) -> None:
        # Activation recompute routes each token twice: first under no_grad (Megatron's checkpoint
        # keeps only the inputs), then again in the backward with gradients on; Megatron's router
        # records its aux loss only in the second (torch.is_grad_enabled()), and so do these counts
        if self._iteration is None or not router.training or not torch.is_grad_enabled():
            return
        _, routing_map = output
        counts = routing_map.detach().sum(dim=0).to("cpu", torch.int64)
        layer = int(router.layer_number)
        self._counts[layer] = self._counts.get(layer, 0) + counts

    def begin(self, iteration: int) -> None:
        self._iteration, self._counts = iteration, {}

    def end(self) -> None:
        if self._iteration is None or not self.routers:
            self._iteration = None
            return
        from megatron.core.transformer.moe.moe_logging import get_moe_metrics_tracker

        tracker = get_moe_metrics_tracker()
        entry = tracker.metrics.get("load_balancing_loss")
        aux = entry.values.detach().to("cpu", torch.float64).tolist() if entry is not None else None
        tracker.clear()  # as Megatron's report() does each iteration: values are per step
        for layer, counts in sorted(self._counts.items()):
            self.rows.append({"rank": self.rank, "iteration": self._iteration, "layer": layer,
                              "tokens_per_expert": counts.tolist(),
                              "aux_loss_partial": aux[layer - 1] if aux is not None else None})
        self._iteration = None

    def finish(self, run_dir: Path) -> None:
        """Gather every rank's rows to rank 0 and write moe.jsonl (a collective: all ranks call it)."""

        rows = gather_to_rank0(self.rows)
        if dist.get_rank() != 0 or not any(rows):
            return  # dense model: no file
        path = Path(run_dir) / names.MOE
        tmp = Path(str(path) + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in sorted(
            (r for rank in rows for r in rank), key=lambda r: (r["iteration"], r["layer"], r["rank"]))))
        tmp.replace(path)
