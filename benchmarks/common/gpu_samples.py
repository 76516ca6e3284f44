"""The GPU's clock, power and temperature once a second while a benchmark's job runs (nvidia-smi in
the background): whether a long run's slowdown is the GPU settling under load (on an H200 the
precision benchmark's jobs sit at the 700 W limit, the clock falling as the GPU warms:
docs/results/precision.md)."""
import statistics


class GpuSamples:
    """The GPU's SM clock (MHz), power (W) and temperature (C) once a second while a job runs, from
    nvidia-smi: a long run's steps slow down over its first ~75 iterations and then hold, the shape of
    clocks settling under sustained load; these samples say whether that is it."""
    QUERY = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu", "--format=csv,noheader,nounits",
             "-lms", "1000"]

    def __enter__(self):
        import shutil
        import subprocess
        import tempfile
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(self.QUERY, stdout=self.log, stderr=subprocess.DEVNULL) \
            if shutil.which("nvidia-smi") else None
        return self

    def __exit__(self, *exc):
        self.rows = []
        if self.proc:
            self.proc.terminate()
            self.proc.wait()
            self.log.seek(0)
            for line in self.log:
                try:
                    row = [float(v) for v in line.split(",")]
                except ValueError:  # "[N/A]"
                    continue
                if len(row) == 3:  # (not a line cut off by terminate())
                    self.rows.append(row)
        self.log.close()

    def summary(self) -> dict | None:
        """Per-second samples and their medians over the first and the last minute."""
        if not self.rows:
            return None
        names = ("sm_mhz", "power_w", "temperature_c")
        first, last = self.rows[:60], self.rows[-60:]
        return {"per_second": self.rows, "columns": list(names),
                "first_minute": {n: statistics.median(r[i] for r in first) for i, n in enumerate(names)},
                "last_minute": {n: statistics.median(r[i] for r in last) for i, n in enumerate(names)}}
