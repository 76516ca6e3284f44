"""JobSpec.torch_profile=FILE: torch.profiler over the last two training iterations of rank 0, written
as two tables (by device time, by host time) and the device's idle gaps in the first of the two
(gpu_idle.py: what the host was doing while the GPU waited; the last iteration is left out of that
because its replica check copies every parameter to the host). A benchmarking aid for finding
where a GPU step's time goes (benchmarks/speed/throughput.py and benchmarks/speed/precision.py set it); off by
default because the profiler itself slows the step it watches. Recording every host-side operation
slows the host ~2x, enough to turn a step whose host runs ahead of the GPU into one that waits
for it; torch_profile_mode="device" records device activity and launches only (no host ranges,
no tables by host time) over the one iteration, for idle figures close to an unprofiled step's."""
from __future__ import annotations

from pathlib import Path


class ProfileWindow:
    def __init__(self, spec, rank: int):
        iters = spec.iters  # rules/debug.py: 3 or more, on cuda
        self.path = Path(spec.torch_profile) if spec.torch_profile and rank == 0 else None
        self.device_only = spec.torch_profile_mode == "device"
        self.first = iters - 2  # 0-based iterations profiled: first..last
        self.last = self.first if self.device_only else iters - 1
        self._prof = self._label = None

    def before(self, it: int) -> None:
        if self.path is not None and it == self.first:
            from torch.profiler import ProfilerActivity, profile
            activities = [ProfilerActivity.CUDA] + ([] if self.device_only else [ProfilerActivity.CPU])
            self._prof = profile(activities=activities)
            self._prof.__enter__()
        if self._prof is not None and not self.device_only:
            from torch.profiler import record_function
            self._label = record_function(f"kit iteration {it + 1}")  # the idle analysis' window
            self._label.__enter__()

    def after(self, it: int) -> None:
        if self._label is not None:
            self._label.__exit__(None, None, None)
            self._label = None
        if self._prof is None or it != self.last:
            return
        import torch
        torch.cuda.synchronize()
        self._prof.__exit__(None, None, None)
        table = self._prof.key_averages()
        self.path.write_text("# by device time\n" + table.table(sort_by="cuda_time_total", row_limit=40)
                             + "\n# by host time (self)\n" + table.table(sort_by="self_cpu_time_total", row_limit=40)
                             + f"\n# device idle in iteration {self.first + 1}\n" + self._idle())  # + FILE.idle.json
        self._prof = None

    def _idle(self) -> str:
        import json
        import tempfile

        from helpers.runtime.measure import gpu_idle
        with tempfile.TemporaryDirectory() as tmp:
            trace_path = Path(tmp) / "trace.json"
            self._prof.export_chrome_trace(str(trace_path))
            trace = json.loads(trace_path.read_text())
        window = None if self.device_only else gpu_idle.window_of(trace, f"kit iteration {self.first + 1}")
        if window is None and not self.device_only:
            return "iteration range not found\n"
        idle = gpu_idle.idle_gaps(trace, window)
        self.path.with_suffix(".idle.json").write_text(json.dumps(idle, indent=1))
        return gpu_idle.as_text(idle)
