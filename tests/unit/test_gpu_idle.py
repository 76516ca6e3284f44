"""The device-idle analysis of a profiled step (helpers/runtime/measure/gpu_idle.py) on a hand-made
trace: which gaps it finds, whether the host or the device side is charged, and which host ranges."""
from helpers.runtime.measure import gpu_idle


def op(name, ts, dur, tid=1, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid}


def kernel(name, ts, dur, corr):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "tid": 7, "args": {"correlation": corr}}


def launch(ts, corr, tid=1, cat="cuda_runtime"):
    return {"ph": "X", "cat": cat, "name": "cudaLaunchKernel", "ts": ts, "dur": 1, "tid": tid,
            "args": {"correlation": corr}}


TRACE = {"traceEvents": [
    op("kit iteration 5", 0, 1000, cat="user_annotation"),
    op("Optimizer.step", 100, 300),
    op("aten::add_", 350, 20),
    op("FP8MatmulBackward", 500, 200, tid=2),
    kernel("gemm", 10, 90, corr=1), launch(5, 1),             # busy 10..100
    kernel("adam", 120, 30, corr=2), launch(50, 2),           # launched early: a device-side gap of 20
    kernel("add", 360, 10, corr=3), launch(355, 3),           # launched at 355 > 150: host late, 210
    kernel("cast", 600, 50, corr=4), launch(590, 4, tid=2, cat="cuda_driver"),  # host late, 230
    kernel("tiny", 651, 5, corr=5), launch(600, 5, tid=2),    # a 1 µs gap: below min_gap_us
    kernel("outside", 5000, 10, corr=6), launch(4990, 6),     # outside the window
]}


def test_gaps_are_found_and_charged_to_the_host_range_that_launched_late():
    window = gpu_idle.window_of(TRACE, "kit iteration 5")
    assert window == (0.0, 1000.0)
    r = gpu_idle.idle_gaps(TRACE, window)
    assert r["device_events"] == 5
    assert r["span_us"] == 656 - 10
    assert (r["idle_device_us"], r["idle_host_us"], r["gaps"]) == (20, 210 + 230, 3)
    assert r["busy_us"] == 90 + 30 + 10 + 50 + 1 + 5  # the 1 µs gap counts as busy (below the threshold)
    assert r["host_idle_by_range"] == [["FP8MatmulBackward", "FP8MatmulBackward", 230],
                                       ["kit iteration 5", "aten::add_", 210]]
    assert r["host_idle_by_thread"] == {"2": 230, "1": 210}
    assert r["host_idle_by_next_kernel"] == [["cast", 230], ["add", 210]]
    longest = r["longest"][0]
    assert (longest["gap_us"], longest["after"], longest["before"]) == (230, "add", "cast")
    assert r["longest"][1]["launched_in"] == ["kit iteration 5", "Optimizer.step", "aten::add_"]
    assert "idle waiting for the host 0.4 ms" in gpu_idle.as_text(r)


def test_without_a_window_every_device_event_counts():
    r = gpu_idle.idle_gaps(TRACE)
    assert r["device_events"] == 6 and r["gaps"] == 4
    assert gpu_idle.idle_gaps({"traceEvents": []}) == {"device_events": 0}
