"""benchmarks/common/gpu_samples.py's GpuSamples: nvidia-smi's once-a-second clock/power/temperature lines
become rows, unreadable ones ("[N/A]", a line cut off when the sampler is stopped) are dropped, and a
machine without nvidia-smi records None instead of failing the benchmark."""
import os
import time

from benchmarks.common.gpu_samples import GpuSamples


def fake_nvidia_smi(folder, lines):
    script = folder / "nvidia-smi"
    body = "".join(f"echo '{line}'\n" for line in lines)
    script.write_text(f"#!/bin/sh\n{body}exec sleep 30\n")  # exec: terminate() stops the sleep itself
    script.chmod(0o755)


def test_rows_are_parsed_and_unreadable_lines_dropped(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, ["1980, 650.5, 61", "[N/A], 640.0, 62", "1755, 700.0, 70", "17"])
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with GpuSamples() as gpu:
        time.sleep(0.5)  # the fake prints at once, then waits to be terminated
    summary = gpu.summary()
    assert gpu.rows == [[1980.0, 650.5, 61.0], [1755.0, 700.0, 70.0]]  # "17": too few columns is dropped too
    assert summary["columns"] == ["sm_mhz", "power_w", "temperature_c"]
    assert summary["first_minute"] == {"sm_mhz": 1867.5, "power_w": 675.25, "temperature_c": 65.5}
    assert gpu.proc.poll() is not None  # the sampler is stopped, not left running


def test_no_nvidia_smi_records_none(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: nothing to find
    with GpuSamples() as gpu:
        pass
    assert gpu.summary() is None
