"""The advisor's time model against NVIDIA's published Megatron-Bridge throughput: per row of
$KIT_DATA_DIR/megatron_bridge_perf/pretrain_performance.csv (one tuned layout per model, system, GPU
count and precision, Megatron-Core with Transformer Engine; tokens/s/GPU), the time model's
prediction for that exact layout beside the published number. One constant is fitted on the table's
MoE rows (helpers/perf/calibration.py MOE_HOST_S), and checked leaving each MoE model out (`--fit`); nothing else,
so the dense rows and every system are held out as they stand.

What the table does not say is taken as Megatron-Bridge's performance recipes usually set it, and
named here: the distributed optimizer on, expert tensor parallel 1, sequence parallel with TP > 1,
no activation recompute, gradients reduced in fp32 (bf16 with Megatron-FSDP), balanced routing
("dropless" and "tokendrop" alike), a layer count the pipeline does not divide timed as its
busiest model chunk, GB200/GB300 jobs in NVLink domains of up to 72 GPUs (`nvlink_domain`). A row
the model cannot express is listed with the reason. The page also sets each case's published layout
beside the advisor's own pick (bridge_best.py).

    python -m benchmarks.advisor.bridge_table [--fit] [--write docs/results/advisor_bridge.md] [--json FILE]
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from helpers.advisor.execution import MEGATRON_CORE, Execution
from helpers.advisor.time import step
from helpers.job.layout import Layout
from helpers.job.models import ModelPreset, preset
from helpers.memory.training import Training
from helpers.perf import calibration, gpus

# The table's model names (before any " (variant)") -> the kit's presets, built from the models'
# published config.json (helpers/job/models.py); None: no published configuration here
MODELS = {"LLAMA3_8B": "llama3-8b", "LLAMA3_70B": "llama3-70b", "LLAMA3.1_405B": "llama3.1-405b",
          "DeepSeekV3": "deepseek-v3", "Qwen3_30B_a3B": "qwen3-30b-a3b", "Qwen3_235B_a22B": "qwen3-235b-a22b",
          "GPT OSS 120B": "gpt-oss-120b", "Kimi_K2": "kimi-k2", "Nemotron_3_Nano": "nemotron-3-nano-30b-a3b",
          "Nemotron_3_Super": None}
SYSTEMS = {"DGX-H100": "h100-80gb", "DGX-B200": "b200", "DGX-B300": "b300", "DGX-GB200": "gb200",
           "DGX-GB300": "gb300"}
# The table's precision labels: FP8 (delayed scaling), FP8-CS (current scaling), FP8-MX / MXFP8
# (32-element blocks with E8M0 scales: Blackwell), NVFP4
PRECISIONS = {"BF16": "bf16", "FP8": "fp8", "FP8-CS": "fp8", "FP8-MX": "fp8", "MXFP8": "fp8"}


def data_path() -> Path | None:
    root = os.environ.get("KIT_DATA_DIR")
    path = Path(root) / "megatron_bridge_perf" / "pretrain_performance.csv" if root else None
    return path if path and path.exists() else None


@dataclass(frozen=True)
class Published:
    release: str
    system: str
    model: str
    gpus: int
    precision: str
    gbs: int
    mbs: int
    seq: int
    fsdp: int
    tp: int
    pp: int
    cp: int
    vp: int | None
    ep: int
    tokens_per_s_per_gpu: float

    @property
    def family(self) -> str:
        return self.model.split(" (")[0]

    @property
    def case(self) -> tuple:
        return (self.family, self.system, self.gpus, self.precision)


def _size(text: str) -> int | None:
    """A layout column: "n/a" (not used) is None."""
    return None if text == "n/a" else int(text)


def read(path: Path) -> list[Published]:
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            vp = _size(r["vp"])
            out.append(Published(r["release"], r["system"], r["model"], int(r["gpus"]), r["precision"],
                                 int(r["gbs"]), int(r["mbs"]), int(r["seq"]), _size(r["fsdp"]) or 0,
                                 _size(r["tp"]) or 1, _size(r["pp"]) or 1, _size(r["cp"]) or 1,
                                 vp if vp and vp > 1 else None, _size(r["ep"]) or 1, float(r["tok_s_gpu"])))
    return out


def model_of(row: Published) -> ModelPreset | str:
    """The preset for a row, or why there is none."""
    name = MODELS.get(row.family)
    if name is None:
        return f"{row.family}: no published configuration in the kit"
    m = preset(name)
    if "w/o MTP" in row.model:
        m = m.with_(mtp_num_layers=0)
    return m


def expressed(row: Published) -> tuple[ModelPreset, Layout, Training, gpus.GpuProfile] | str:
    """The row as the time model's inputs, or the reason it cannot be."""
    m = model_of(row)
    if isinstance(m, str):
        return m
    if row.precision not in PRECISIONS:
        return f"precision {row.precision}: the time model has no GEMM rate for it"
    if SYSTEMS[row.system] not in gpus.PROFILES:
        return f"{row.system}: no GPU profile"
    gpu = gpus.PROFILES[SYSTEMS[row.system]]
    chunks = row.pp * (row.vp or 1)
    if m.num_layers % chunks:
        # Megatron-Bridge's recipes split such a model unevenly (the embedding and the loss counted as a
        # layer each, or an explicit pipeline layout): timed as its busiest model chunk, every chunk
        # holding ceil(layers / chunks) layers
        m = m.with_(num_layers=-(-m.num_layers // chunks) * chunks,
                    first_k_dense=min(m.first_k_dense, -(-m.num_layers // chunks) * chunks - 1))
    domain = nvlink_domain(row.gpus, gpu.nvlink_domain)
    lay = Layout(nproc=row.gpus, tp=row.tp, pp=row.pp, cp=row.cp, ep=row.ep, etp=1 if m.is_moe else None,
                 vpp=row.vp, sp=row.tp > 1, micro_batch=row.mbs, global_batch=row.gbs, seq_len=row.seq,
                 gpus_per_node=domain, backend="te")
    if row.gbs % (row.mbs * lay.dp):
        return f"global batch {row.gbs} is not a multiple of micro batch x DP ({row.mbs} x {lay.dp})"
    problems = [v for v in lay.validate(m) if v.category != "backend"]  # the layout rules, not the kit's worker
    if problems:
        return "the layout rules refuse it: " + "; ".join(v.name for v in problems)
    fsdp = "optim_grads_params" if row.fsdp else None
    training = Training(precision=PRECISIONS[row.precision], dist_opt=True, fsdp=fsdp,
                        grad_reduce_in_fp32=not fsdp)
    return m, lay, training, gpu


def nvlink_domain(world: int, largest: int) -> int:
    """GPUs per NVLink domain of a job: the profile's (8 in a DGX node, 72 in an NVL72 rack), or for a
    job that does not fill whole racks the largest divisor of its GPU count up to that size that
    whole compute trays of 4 make (256 GPUs on NVL72 racks: 4 domains of 64)."""
    if world <= largest:
        return world
    return max(d for d in range(4, largest + 1, 4) if world % d == 0) if largest > 8 else largest


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
            predicted = step.predict(m, lay, training, gpu, lay.gpus_per_node, precision_execution(training))
        except (ValueError, KeyError, ZeroDivisionError) as e:
            out.append(Result(row, reason=f"the time model refuses it: {e}"))
            continue
        out.append(Result(row, predicted.tokens_per_s_per_gpu))
    return out


def precision_execution(training: Training) -> Execution:
    """Megatron-Core's execution with the row's precision and gradient-reduce dtype."""
    return MEGATRON_CORE.with_(precision=training.precision, grad_reduce_bytes=4 if training.grad_reduce_in_fp32 else 2)


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


GRID = [i * 0.25e-3 for i in range(41)]  # 0 to 10 ms


def fit(rows: list[Published]) -> dict:
    """calibration.MOE_HOST_S fitted on the MoE rows (median |error| of tokens/s/GPU over a grid), on
    all of them and leaving each MoE model out in turn: the held-out model's error with the others'
    fit. The step time is linear in the constant (every MoE layer-microbatch on the critical path
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
        return min(GRID, key=lambda h: statistics.median(abs(e) for e in errors(h, idx)))

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
    q = sorted(abs(x) for x in every)
    return {"all_rows_ms": best(moe) * 1e3, "held_out": held, "rows": len(q), "median_abs_error": statistics.median(q),
            "p90_abs_error": q[int(round(0.9 * (len(q) - 1)))]}


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
        "ms, fitted on the MoE rows); nothing else, so the dense rows and every system are held out as they "
        "stand, and the MoE models are held out one at a time below.",
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
                  f"90th percentile {fitted['p90_abs_error']:.0%}.", ""]
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
        from benchmarks.advisor import bridge_best  # it reads the table through this module

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
