"""Where a profiled GPU step waits: the device's idle gaps, and what the host was doing instead.

torch.profiler's tables (torch_profile.py) add up kernel time; a step's time is kernel time plus
the time the device sat idle. This reads the profiler's trace (Chrome trace JSON: device events
with a `correlation` id that matches the host-side launch that queued them) and measures every
gap between device activity inside one window (one training iteration). A gap ends with a kernel
(or copy) whose launch is found by its correlation id:
  * launched after the gap began: the host was late ("host" gaps) — the device had run out of
    queued work; the gap is charged to what the host was inside when it finally launched (the
    outermost and innermost profiler ranges around that launch, e.g. an autograd Function's
    backward, `aten::item` waiting for a loss, an optimizer step);
  * launched before: the device waited for something else (another stream, an event, a host copy:
    "device" gaps).
Pure Python over the trace's dicts, so the arithmetic is tested on CPU with a hand-made trace
(tests/unit/test_gpu_idle.py)."""
from __future__ import annotations

import bisect
from collections import defaultdict

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")  # Triton launches through the driver API
RANGE_CATEGORIES = ("cpu_op", "user_annotation", "python_function")


def _interval(event: dict) -> tuple[float, float]:
    t0 = float(event["ts"])
    return t0, t0 + float(event.get("dur", 0.0))


class _Ranges:
    """One host thread's profiler ranges. Ranges on one thread nest, so each has a parent (the
    innermost range around it) and the ranges containing a time are one chain of parents."""

    def __init__(self, spans: list[tuple[float, float, str]]):
        spans.sort(key=lambda s: (s[0], -s[1]))  # outer before inner at equal starts
        self.starts = [s[0] for s in spans]
        self.spans, self.parent, stack = spans, [], []
        for i, (t0, t1, _) in enumerate(spans):
            while stack and spans[stack[-1]][1] < t0:
                stack.pop()
            self.parent.append(stack[-1] if stack else -1)
            stack.append(i)

    def enclosing(self, t: float) -> list[str]:
        """Names of the ranges containing time t, outermost first."""
        i = bisect.bisect_right(self.starts, t) - 1
        while i >= 0 and self.spans[i][1] < t:
            i = self.parent[i]
        chain = []
        while i >= 0:
            chain.append(self.spans[i][2])
            i = self.parent[i]
        return chain[::-1]


def _ranges_by_thread(events: list[dict]) -> dict:
    by_tid = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in RANGE_CATEGORIES:
            by_tid[e.get("tid")].append(_interval(e) + (e["name"],))
    return {tid: _Ranges(spans) for tid, spans in by_tid.items()}


def idle_gaps(trace: dict, window: tuple[float, float] | None = None, min_gap_us: float = 2.0,
              top: int = 12) -> dict:
    """Idle time of the device in `window` (host clock, µs; default: all device activity).
    Returns totals, the idle charged per (outermost, innermost) host range for host gaps, and the
    `top` longest gaps with the kernels on either side."""
    events = trace.get("traceEvents", trace if isinstance(trace, list) else [])
    device = sorted((_interval(e) + (e.get("name", "?"), (e.get("args") or {}).get("correlation"))
                     for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES),
                    key=lambda d: d[0])
    if window is not None:
        device = [d for d in device if d[0] >= window[0] and d[1] <= window[1]]
    if not device:
        return {"device_events": 0}
    launches = {(e.get("args") or {}).get("correlation"): e for e in events
                if e.get("ph") == "X" and e.get("cat") in LAUNCH_CATEGORIES}
    ranges = _ranges_by_thread(events)

    busy_end, previous = device[0][1], device[0][2]
    gaps, idle, charged = [], {"host": 0.0, "device": 0.0}, defaultdict(float)
    by_thread, by_next = defaultdict(float), defaultdict(float)  # host gaps: launching thread, kernel after
    for t0, t1, name, corr in device[1:]:
        if t0 - busy_end >= min_gap_us:
            gap = t0 - busy_end
            launch = launches.get(corr)
            late = launch is not None and float(launch["ts"]) > busy_end
            kind = "host" if late else "device"
            idle[kind] += gap
            thread = ranges.get(launch.get("tid")) if launch else None
            where = thread.enclosing(float(launch["ts"])) if thread else []
            if late:
                charged[(where[0] if where else "?", where[-1] if where else "?")] += gap
                by_thread[str(launch.get("tid"))] += gap
                by_next[name[:60]] += gap
            gaps.append({"gap_us": gap, "kind": kind, "after": previous, "before": name, "launched_in": where})
        if t1 > busy_end:
            busy_end, previous = t1, name
    span = busy_end - device[0][0]
    busy = span - idle["host"] - idle["device"]
    return {
        "device_events": len(device),
        "span_us": span, "busy_us": busy, "idle_host_us": idle["host"], "idle_device_us": idle["device"],
        "gaps": len(gaps),
        "host_idle_by_range": sorted(([outer, inner, us] for (outer, inner), us in charged.items()),
                                     key=lambda r: -r[2])[:top],
        "host_idle_by_thread": dict(sorted(by_thread.items(), key=lambda kv: -kv[1])),
        "host_idle_by_next_kernel": sorted(([k, us] for k, us in by_next.items()), key=lambda r: -r[1])[:top],
        "longest": sorted(gaps, key=lambda g: -g["gap_us"])[:top],
    }


def window_of(trace: dict, annotation: str) -> tuple[float, float] | None:
    """The host interval of the first profiler range named `annotation` (a record_function)."""
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "X" and e.get("cat") in RANGE_CATEGORIES and e.get("name") == annotation:
            return _interval(e)
    return None


def as_text(result: dict) -> str:
    if not result.get("device_events"):
        return "no device activity in the window\n"
    def ms(us):
        return f"{us / 1000:.1f} ms"
    summary = (f"span {ms(result['span_us'])}: busy {ms(result['busy_us'])}, idle waiting for the host "
               f"{ms(result['idle_host_us'])}, idle waiting on the device side {ms(result['idle_device_us'])} "
               f"({result['gaps']} gaps)")
    lines = [summary, "host-late idle by (outermost, innermost) host range at the launch:"]
    lines += [f"  {ms(us):>9}  {outer}  >  {inner}" for outer, inner, us in result["host_idle_by_range"]]
    lines.append("host-late idle by launching thread: " + ", ".join(
        f"{tid} {ms(us)}" for tid, us in result["host_idle_by_thread"].items()))
    lines.append("host-late idle by the kernel that ended the gap:")
    lines += [f"  {ms(us):>9}  {name}" for name, us in result["host_idle_by_next_kernel"]]
    lines.append("longest gaps:")
    lines += [f"  {ms(g['gap_us']):>9} {g['kind']:6} after {g['after'][:50]!r} before {g['before'][:50]!r}"
              f" launched in {' > '.join(g['launched_in'][-4:])}" for g in result["longest"]]
    return "\n".join(lines) + "\n"
