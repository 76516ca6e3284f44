"""The advisor's time model against NVIDIA's published Megatron-Bridge throughput: per row of
$KIT_DATA_DIR/megatron_bridge_perf/pretrain_performance.csv (read by bridge_rows.py, which says what
the table leaves open and how it is taken), the time model's prediction for that exact layout beside
the published number. One constant is fitted on the table's MoE rows (helpers/perf/calibration.py
MOE_HOST_S, the value that minimises their mean |error|), and checked leaving each MoE model out and
each system out (`--fit`); nothing else, so the dense rows are held out as they stand. A row the
model cannot express is listed with the reason. The page also sets each case's published layout
beside the advisor's own pick (bridge_best.py).

    python -m benchmarks.advisor.bridge_table [--fit] [--write docs/results/advisor_bridge.md] [--json FILE]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.advisor import bridge_best
from benchmarks.advisor.bridge_rows import Published, data_path, expressed, model_of, precision_execution, read
from helpers.advisor.time import step
from helpers.perf import calibration

@dataclass
class Result:
    row: Published
    predicted: float | None = None
    reason: str | None = None

    @property
    def error(self) -> float | None:
        return None if self.predicted is None else self.predicted / self.row.tokens_per_s_per_gpu - 1


def evaluate(rows: list[Published]) -> list[Result]:
    out = []
    for row in rows:
        inputs = expressed(row)
        if isinstance(inputs, str):
            out.append(Result(row, reason=inputs))
            continue
        m, lay, training, gpu = inputs
        try:
            predicted = step.predict(m, lay, training, gpu, lay.gpus_per_node, precision_execution(training, row))
        except (ValueError, KeyError, ZeroDivisionError) as e:
            out.append(Result(row, reason=f"the time model refuses it: {e}"))
            continue
        out.append(Result(row, predicted.tokens_per_s_per_gpu))
    return out


def _steps(rows: list[Published], host_s: float) -> list[float | None]:
    """Each row's predicted step seconds with calibration.MOE_HOST_S = host_s (None: not expressed)."""
    kept, calibration.MOE_HOST_S = calibration.MOE_HOST_S, host_s
    try:
        out = []
        for r in evaluate(rows):
            out.append(None if r.predicted is None else r.row.gbs * r.row.seq / r.predicted / r.row.gpus)
        return out
    finally:
        calibration.MOE_HOST_S = kept


# 0 to 10 ms by 0.01 ms: the mean |error| the fit minimises moves smoothly with the constant, so the grid's step
# only rounds the minimum
GRID = [i * 0.01e-3 for i in range(1001)]


def objective(errors: list[float]) -> float:
    """What the fit minimises: the mean |error| of tokens/s/GPU over the fitted rows. A mean, not a
    median, because every row moves it a little as the constant moves; a median follows one middle row
    and jumps to another minimum when a model is held out."""
    return statistics.mean(abs(e) for e in errors)


def fit(rows: list[Published]) -> dict:
    """calibration.MOE_HOST_S fitted on the MoE rows (`objective` over GRID), on
    all of them, leaving each MoE model out in turn (the held-out model's error with the others' fit),
    and leaving each system out (every row of it with the constant fitted on the other systems' MoE rows). The step time is linear in the constant (every MoE layer-microbatch on the critical path
    adds it), so two evaluations give every grid point."""
    zero, one = _steps(rows, 0.0), _steps(rows, 1e-3)
    moe = [i for i, r in enumerate(rows) if zero[i] is not None and not isinstance(model_of(r), str)
           and model_of(r).is_moe]

    def errors(host: float, idx: list[int]) -> list[float]:
        out = []
        for i in idx:
            step_s = zero[i] + (one[i] - zero[i]) * host / 1e-3
            predicted = rows[i].gbs * rows[i].seq / step_s / rows[i].gpus
            out.append(predicted / rows[i].tokens_per_s_per_gpu - 1)
        return out

    def best(idx: list[int]) -> float:
        return min(GRID, key=lambda h: objective(errors(h, idx)))

    families = sorted({rows[i].family for i in moe})
    held, every = {}, errors(0.0, [i for i in range(len(rows)) if zero[i] is not None and i not in moe])
    for family in families:
        train = [i for i in moe if rows[i].family != family]
        test = [i for i in moe if rows[i].family == family]
        host = best(train)
        e = errors(host, test)
        every += e
        held[family] = {"fitted_ms": host * 1e3, "rows": len(test), "median_abs_error": statistics.median(abs(x) for x in e),
                        "median_signed_error": statistics.median(e)}
    # each system held out: the constant fitted on the other systems' MoE rows, every row of the system scored
    by_system, every_system = {}, []
    for system in sorted({r.system for r in rows}):
        test = [i for i, r in enumerate(rows) if r.system == system and zero[i] is not None]
        if not test:
            continue
        host = best([i for i in moe if rows[i].system != system])
        e = errors(host, test)
        every_system += e
        by_system[system] = {"fitted_ms": host * 1e3, "rows": len(test),
                             "median_abs_error": statistics.median(abs(x) for x in e),
                             "median_signed_error": statistics.median(e)}
    q, qs = sorted(abs(x) for x in every), sorted(abs(x) for x in every_system)
    return {"all_rows_ms": best(moe) * 1e3, "held_out": held, "rows": len(q), "median_abs_error": statistics.median(q),
            "p90_abs_error": q[int(round(0.9 * (len(q) - 1)))], "systems_held_out": by_system,
            "systems_median_abs_error": statistics.median(qs),
            "systems_p90_abs_error": qs[int(round(0.9 * (len(qs) - 1)))]}


def summary(results: list[Result]) -> dict:
    errors = [abs(r.error) for r in results if r.error is not None]
    if not errors:
        return {"rows": len(results), "expressed": 0}
    q = sorted(errors)
    return {"rows": len(results), "expressed": len(errors), "median_abs_error": statistics.median(errors),
            "p90_abs_error": q[min(len(q) - 1, int(round(0.9 * (len(q) - 1))))],
            "median_signed_error": statistics.median(r.error for r in results if r.error is not None)}


def groups(results: list[Result], key) -> dict:
    out = {}
    for r in results:
        out.setdefault(key(r.row), []).append(r)
    return {k: summary(v) for k, v in sorted(out.items())}


def markdown(results: list[Result], command: str, fitted: dict | None = None, picks: list[str] | None = None) -> str:
    """The page; `picks`: the lines of the published-against-pick section (bridge_best.section)."""
    s = summary(results)
    lines = [
        "# The advisor against NVIDIA's published Megatron-Bridge throughput",
        "",
        f"Command: `{command}`. Date: {time.strftime('%Y-%m-%d')}. No GPU: a prediction per published row "
        "(benchmarks/advisor/bridge_table.py says what the table leaves open and how it is taken).",
        "",
        f"Rows: {s['rows']}; expressed: {s['expressed']}. One constant of the time model is fitted on this table: "
        f"the host time a MoE layer adds per micro batch (`calibration.MOE_HOST_S`, {calibration.MOE_HOST_S * 1e3:g} "
        "ms, the value on a 0.01 ms grid from 0 to 10 ms that minimises the mean |error| of tokens/s/GPU over the "
        "MoE rows; the same fit on fewer rows below); nothing else, so the dense rows are held out as they stand, "
        "and the MoE models and the systems are held out one at a time below. What each row's recipe sets beyond "
        "the table (expert all-to-all overlap, recompute modules, activation offloading, bf16 gradient reduction) is "
        "benchmarks/advisor/bridge_rows.py's.",
        "",
    ]
    if fitted:
        lines += ["## Leave one MoE model out", "",
                  f"The host time fitted on every MoE row: {fitted['all_rows_ms']:g} ms. Each MoE model held out: "
                  "fitted on the others, scored on it.", "",
                  "| held-out model | fitted on the others (ms) | rows | median abs error | median signed |",
                  "|---|---|---|---|---|"]
        for family, h in fitted["held_out"].items():
            lines.append(f"| {family} | {h['fitted_ms']:g} | {h['rows']} | {h['median_abs_error']:.0%} | "
                         f"{h['median_signed_error']:+.0%} |")
        lines += ["", f"Every expressed row, each MoE model scored with the constant fitted on the others (the dense "
                  f"rows as they stand): {fitted['rows']} rows, median |error| {fitted['median_abs_error']:.0%}, "
                  f"90th percentile {fitted['p90_abs_error']:.0%}.", "",
                  "## Leave one system out", "",
                  "Each system held out: the host time fitted on the other systems' MoE rows, every row of the "
                  "system scored with it.", "",
                  "| held-out system | fitted on the others (ms) | rows | median abs error | median signed |",
                  "|---|---|---|---|---|"]
        for system, h in fitted["systems_held_out"].items():
            lines.append(f"| {system} | {h['fitted_ms']:g} | {h['rows']} | {h['median_abs_error']:.0%} | "
                         f"{h['median_signed_error']:+.0%} |")
        lines += ["", "Every expressed row, each system scored with the constant fitted on the others: median "
                  f"|error| {fitted['systems_median_abs_error']:.0%}, 90th percentile "
                  f"{fitted['systems_p90_abs_error']:.0%}.", ""]
    if s["expressed"]:
        lines += [f"Median |error| of tokens/s/GPU: {s['median_abs_error']:.0%}; 90th percentile: "
                  f"{s['p90_abs_error']:.0%}; median signed error: {s['median_signed_error']:+.0%} "
                  "(positive: predicted faster than published).", ""]
    for title, key in (("By model", lambda r: r.family), ("By system", lambda r: r.system),
                       ("By precision", lambda r: r.precision)):
        lines += [f"## {title}", "", "| | rows | median abs error | 90th pct | median signed |", "|---|---|---|---|---|"]
        for k, g in groups(results, key).items():
            if g["expressed"]:
                lines.append(f"| {k} | {g['expressed']} | {g['median_abs_error']:.0%} | {g['p90_abs_error']:.0%} | "
                             f"{g['median_signed_error']:+.0%} |")
            else:
                lines.append(f"| {k} | 0 of {g['rows']} | | | |")
        lines.append("")
    lines += picks or []
    lines += ["## Every row", "", "| release | system | model | GPUs | precision | layout (TP PP CP VP EP FSDP, mbs/gbs, seq) "
              "| published | predicted | error |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        p = r.row
        layout = f"{p.tp} {p.pp} {p.cp} {p.vp or 1} {p.ep} {p.fsdp}, {p.mbs}/{p.gbs}, {p.seq}"
        pred = f"{r.predicted:,.0f}" if r.predicted is not None else "—"
        err = f"{r.error:+.0%}" if r.error is not None else r.reason
        lines.append(f"| {p.release} | {p.system} | {p.model} | {p.gpus} | {p.precision} | {layout} | "
                     f"{p.tokens_per_s_per_gpu:,.0f} | {pred} | {err} |")
    reasons = {}
    for r in results:
        if r.reason:
            reasons.setdefault(r.reason, 0)
            reasons[r.reason] += 1
    if reasons:
        lines += ["", "## Rows the model cannot express", ""]
        lines += [f"- {n} row(s): {why}" for why, n in sorted(reasons.items(), key=lambda t: -t[1])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", type=Path, help="write the results page (markdown) here")
    ap.add_argument("--json", type=Path, help="write every row's prediction as JSON here")
    ap.add_argument("--fit", action="store_true", help="fit the MoE host time (all MoE rows, and leaving each "
                    "MoE model out) and print it; the calibration keeps its own value")
    args = ap.parse_args(argv)
    path = data_path()
    if path is None:
        print("error: set KIT_DATA_DIR to the folder holding megatron_bridge_perf/pretrain_performance.csv",
              file=sys.stderr)
        return 2
    rows = read(path)
    fitted = fit(rows) if args.fit or args.write else None
    if fitted:
        print(fitted)
    results = evaluate(rows)
    print(summary(results))
    command = "python -m benchmarks.advisor.bridge_table" + (f" --write {args.write}" if args.write else "")
    if args.write:
        cases = bridge_best.evaluate(rows)
        print(f"published within {bridge_best.WITHIN:.0%} of the advisor's pick: {sum(c.within for c in cases)} of "
              f"{len(cases)} cases")
        args.write.write_text(markdown(results, command, fitted, bridge_best.section(cases)))
    if args.json:
        import json

        args.json.write_text(json.dumps([{**r.row.__dict__, "predicted": r.predicted, "reason": r.reason}
                                         for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
