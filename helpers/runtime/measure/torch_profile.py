"""KIT_TORCH_PROFILE=FILE: torch.profiler over the last two training iterations of rank 0, written
as two tables (by device time, by host time). A benchmarking aid for finding where a GPU step's
time goes (benchmarks/gpu_throughput.py sets it); off by default because the profiler itself slows
the step it watches."""
from __future__ import annotations

import os
from pathlib import Path


class ProfileWindow:
    def __init__(self, iters: int, rank: int):
        target = os.environ.get("KIT_TORCH_PROFILE")
        self.path = Path(target) if target and rank == 0 and iters >= 3 else None
        self.first, self.last = iters - 2, iters - 1  # 0-based iterations profiled
        self._prof = None

    def before(self, it: int) -> None:
        if self.path is not None and it == self.first:
            from torch.profiler import ProfilerActivity, profile
            self._prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            self._prof.__enter__()

    def after(self, it: int) -> None:
        if self._prof is None or it != self.last:
            return
        import torch
        torch.cuda.synchronize()
        self._prof.__exit__(None, None, None)
        table = self._prof.key_averages()
        self.path.write_text("# by device time\n" + table.table(sort_by="cuda_time_total", row_limit=40)
                             + "\n# by host time (self)\n" + table.table(sort_by="self_cpu_time_total", row_limit=40))
        self._prof = None
