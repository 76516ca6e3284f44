"""The results of benchmarks/megatron_lm/roundtrip.py as tables and as its page
(docs/results/megatron_lm_roundtrip.md): which runs there are, which pairs are compared against the
bf16 bound, the comparison of two runs' losses, and the page's text. Reads a results.json; runs nothing
(`python -m benchmarks.megatron_lm.roundtrip --write-page RESULTS.json` renders it on CPU)."""
from __future__ import annotations

BF16_BOUND = 1e-2  # relative loss difference two bf16 runs of one job may show (README: GPU)

# ---- the runs and what is compared ------------------------------------------------------------------------
# key -> (step, what it is, column title)
RUNS = {
    "kit": ("1", "the kit, from scratch to N (saves at N/2 and N)", "kit"),
    "megatron_lm": ("2", "Megatron-LM's pretrain_gpt.py on the kit's megatron-lm.sh, from scratch to N "
                         "(saves at N/2 and N into its own folder)", "Megatron-LM"),
    "megatron_lm_eval_kit": ("3", "Megatron-LM evaluating the kit's iteration-N checkpoint (--skip-train)",
                             "Megatron-LM on kit's N"),
    "megatron_lm_resume_kit": ("4", "Megatron-LM resuming the kit's N/2 checkpoint, to N", "Megatron-LM from kit N/2"),
    "kit_resume_kit": ("4", "the kit resuming its own N/2 checkpoint, to N", "kit from kit N/2"),
    "kit_resume_megatron_lm": ("5", "the kit resuming Megatron-LM's N/2 checkpoint, to N", "kit from Megatron-LM N/2"),
    "bridge_resume_kit": ("6", "Megatron-Bridge's pretrain resuming the kit's N/2 checkpoint, to N",
                          "Bridge from kit N/2"),
}
# (reference run, other run, held to the bf16 bound, note)
COMPARISONS = [
    ("kit", "megatron_lm", True,
     "each side's own random initialisation from seed 1234 (the same weights: iteration 1 shows it), the same "
     "batches"),
    ("kit", "megatron_lm_eval_kit", True, "the same weights (the kit's iteration N), forward only"),
    ("kit", "megatron_lm_resume_kit", True, "Megatron-LM continues the kit's run from its N/2 checkpoint"),
    ("kit_resume_kit", "megatron_lm_resume_kit", True, "both resume the kit's N/2 checkpoint"),
    ("kit", "kit_resume_kit", True, "the kit's own resume against its uninterrupted run"),
    ("megatron_lm", "kit_resume_megatron_lm", True, "the kit continues Megatron-LM's run from its N/2 checkpoint"),
    ("kit", "bridge_resume_kit", True, "Bridge continues the kit's run from its N/2 checkpoint"),
    ("kit_resume_kit", "bridge_resume_kit", True, "both resume the kit's N/2 checkpoint"),
]

# ---- comparisons -------------------------------------------------------------------------------------------
def relative(value: float, reference: float) -> float:
    return abs(value - reference) / abs(reference)


def compare(ref: dict, other: dict) -> dict:
    """Per-iteration losses on the iterations both logged, and the validation and test losses at N."""
    a = dict(zip(ref.get("iterations", []), ref.get("losses", [])))
    b = dict(zip(other.get("iterations", []), other.get("losses", [])))
    common = [i for i in sorted(set(a) & set(b)) if a[i] is not None and b[i] is not None]
    out: dict = {"iterations": [common[0], common[-1]] if common else None}
    if common:
        diffs = {i: relative(b[i], a[i]) for i in common}
        worst = max(diffs, key=diffs.get)
        out.update(max_relative=diffs[worst], at_iteration=worst, reference_loss=a[worst], other_loss=b[worst],
                   relative=[diffs[i] for i in common])
    for split in ("valid", "test"):
        x, y = ref.get(split), other.get(split)
        if x and y and x.get("loss") is not None and y.get("loss") is not None:
            out[split] = {"reference": x["loss"], "other": y["loss"], "relative": relative(y["loss"], x["loss"])}
    worst = [v for v in [out.get("max_relative")] + [out[s]["relative"] for s in ("valid", "test") if s in out]
             if v is not None]
    out["within_bound"] = (max(worst) <= BF16_BOUND) if worst else None
    return out


def comparisons(runs: dict, n: int) -> list[dict]:
    out = []
    for ref, other, held, note in COMPARISONS:
        row = {"reference": ref, "other": other, "held_to_bound": held, "note": note}
        missing = [k for k in (ref, other)
                   if k not in runs or ("error" in runs[k] and not runs[k].get("losses") and not runs[k].get("valid"))]
        if missing:
            row["missing"] = missing
        else:
            row.update(compare(runs[ref], runs[other]))
        out.append(row)
    return out


# ---- tables and the page -----------------------------------------------------------------------------------
def _f(x, digits=5) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def _e(x) -> str:
    return "" if x is None else ("0" if x == 0 else f"{x:.1e}")


def _title(key: str) -> str:
    return RUNS[key][2] if key in RUNS else key


def loss_table(results: dict) -> str:
    runs = results.get("runs", {})
    keys = [k for k in RUNS if runs.get(k, {}).get("losses")]
    if not keys:
        return "(no run logged a loss)"
    iterations = sorted({i for k in keys for i in runs[k]["iterations"]})
    lines = ["| iteration | " + " | ".join(_title(k) for k in keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for i in iterations:
        row = [_f(dict(zip(runs[k]["iterations"], runs[k]["losses"])).get(i)) for k in keys]
        lines.append(f"| {i} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def comparison_table(results: dict) -> str:
    lines = ["| reference | compared | iterations | largest relative loss difference (iteration: reference / compared) "
             "| validation | test | within 1e-2 | |", "|---|---|---|---|---|---|---|---|"]
    for c in results.get("comparisons", []):
        ref, other = _title(c["reference"]), _title(c["other"])
        if "missing" in c:
            runs = results.get("runs", {})
            why = [f"{_title(k)} {'failed' if k in runs else 'did not run'}" for k in c["missing"]]
            lines.append(f"| {ref} | {other} | | not compared: {', '.join(why)} | | | | {c['note']} |")
            continue
        its = f"{c['iterations'][0]}-{c['iterations'][1]}" if c.get("iterations") else ""
        worst = (f"{_e(c['max_relative'])} (it {c['at_iteration']}: {_f(c['reference_loss'])} / {_f(c['other_loss'])})"
                 if c.get("max_relative") is not None else "")
        ev = {s: (f"{_e(c[s]['relative'])} ({_f(c[s]['reference'])} / {_f(c[s]['other'])})" if s in c else "")
              for s in ("valid", "test")}
        within = {True: "yes", False: "no", None: ""}[c.get("within_bound")]
        note = c["note"] + ("" if c["held_to_bound"] else " (not held to the bound)")
        lines.append(f"| {ref} | {other} | {its} | {worst} | {ev['valid']} | {ev['test']} | {within} | {note} |")
    return "\n".join(lines)


def eval_table(results: dict) -> str:
    runs = results.get("runs", {})
    lines = ["| run | validation loss | which pass | test loss |", "|---|---|---|---|"]
    for k in RUNS:
        r = runs.get(k, {})
        v, t = r.get("valid"), r.get("test")
        if v or t:
            which = (v or {}).get("at") or ((f"validation.jsonl, iteration {v['iteration']}") if v else "")
            lines.append(f"| {_title(k)} | {_f((v or {}).get('loss'))} | {which} | {_f((t or {}).get('loss'))} |")
    return "\n".join(lines)


def runs_table(results: dict) -> str:
    runs = results.get("runs", {})
    lines = ["| step | run | result | wall s | loaded |", "|---|---|---|---|---|"]
    for k, (step, what, _) in RUNS.items():
        r = runs.get(k)
        if r is None:
            lines.append(f"| {step} | {what} | not reached | | |")
            continue
        result = "ok" if "error" not in r else ("not run" if r["error"].startswith("not run") else "failed")
        loaded = r.get("loaded") or {}
        loaded_text = (f"iteration {loaded.get('iteration')} from {loaded.get('from') or loaded.get('path') or ''}"
                       if loaded else "")
        lines.append(f"| {step} | {what} | {result} | {r.get('wall_s', '')} | {loaded_text} |")
    return "\n".join(lines)


def failures(results: dict) -> str:
    parts = []
    for k in RUNS:
        r = results.get("runs", {}).get(k, {})
        if "error" in r:
            text = r["error"].strip()
            if len(text) > 2500:
                text = "...\n" + text[-2500:]
            parts.append(f"**{_title(k)}** (step {RUNS[k][0]}):\n\n```\n{text}\n```")
    return "\n\n".join(parts)


def text_tables(results: dict) -> str:
    return "\n\n".join(["Losses per iteration", loss_table(results), "Comparisons (bf16 bound 1e-2 relative)",
                        comparison_table(results), "Validation and test", eval_table(results), "Runs",
                        runs_table(results)])


def render_page(results: dict, source: str, device_command: str, carried_wheels: list[str]) -> str:
    """The page: `device_command` and `carried_wheels` as the driver's docstring and constants give them."""
    n, half = results["iters"], results["resume_iters"]
    versions = results.get("versions", {})
    held = [c for c in results.get("comparisons", []) if c["held_to_bound"] and "missing" not in c
            and c.get("within_bound") is not None]
    verdict = (f"{sum(c['within_bound'] for c in held)} of {len(held)} comparisons held to the bound are within it"
               if held else "no comparison held to the bound could be made")
    makefile = results.get("datasets_makefile", {})
    makefile_said = (f"written: `{makefile['makefile']}`" if makefile.get("written")
                     else makefile.get("note") or makefile.get("error") or "not recorded")
    lines = [
        "# Megatron-LM and Megatron-Bridge through the kit's checkpoints",
        "",
        "Does Megatron-LM's own `pretrain_gpt.py`, run on the `megatron-lm.sh` a kit job writes, train to the kit's "
        "losses; can it evaluate and resume the kit's checkpoints, can the kit resume Megatron-LM's, and can "
        "Megatron-Bridge's `pretrain` resume the kit's? `benchmarks/megatron_lm/roundtrip.py` runs on one GPU: "
        f"the kit's `tiny-gpt` preset at hidden 256 (4 layers, 4 heads, FFN 256, vocabulary 512, RoPE, no biases) on "
        f"WikiText-2 raw through the byte tokenizer, sequence {results['job']['seq_len']}, micro batch "
        f"{results['job']['micro_batch']}, global batch {results['job']['global_batch']}, lr {results['job']['lr']:g} "
        f"constant, bf16, Megatron's local attention on both sides, N = {n} iterations, checkpoints at N/2 = {half} "
        f"and N. Megatron-LM is Megatron-LM `{results.get('megatron_lm_branch', 'core_r0.19.0')}`'s `pretrain_gpt.py` "
        "with the megatron-core wheel; Bridge runs the `bridge_recipe.py` of the same kit run.",
        "",
        "Runs (each its own process; every Megatron-LM and Bridge run saves into its own folder, never into the kit's "
        "run directory):",
        "",
        runs_table(results),
        "",
        "```bash",
        "# on the GPU machine, carry .whl .megatron-lm .kitdata",
        device_command,
        "# then, anywhere",
        f"python -m benchmarks.megatron_lm.roundtrip --write-page {source}",
        "```",
        "",
        f"## Measured {results['date'][:10]} on one {results.get('gpu') or 'GPU (name not recorded)'}",
        "",
        f"Python {versions.get('python')}, torch {versions.get('torch')} (CUDA {versions.get('cuda')}), megatron-core "
        f"{versions.get('megatron-core')}, megatron-bridge {versions.get('megatron-bridge')}, transformers "
        f"{versions.get('transformers')}; Transformer Engine {versions.get('transformer-engine') or 'absent'}, apex "
        f"{versions.get('apex') or 'absent'}. Kit revision {results.get('kit_revision') or 'not recorded'}; "
        f"the whole run took {results.get('wall_s', '?')} s. Raw: `{source}`.",
        "",
        f"The bound: two bf16 runs of one job agree within **1e-2 relative** per iteration (README, "
        "\"GPU\": bf16 keeps 8 significant bits, so differences of a few 1e-3 are rounding; a real mismatch moves the "
        "loss by 1e-1 or more within a few iterations). Each row gives the largest relative difference "
        "|compared - reference| / |reference| over the iterations both runs logged, and at iteration N the "
        f"validation and test losses (eval_iters global batches from each set's first sample). {verdict}.",
        "",
        comparison_table(results),
        "",
        "### Losses per iteration",
        "",
        loss_table(results),
        "",
        "Megatron-LM's own iteration lines print the mean \"lm loss\" since the last reset, and its `training_log` "
        "does not reset after a run's first iteration (it prints that one to show the start-up's cost), so the second "
        "line of every Megatron-LM run prints the mean of the run's first two iterations. The table gives that "
        "iteration's own loss, 2 x printed - the first line's (`results.json` keeps the printed values as "
        "`printed_losses`). Bridge's losses are its callback's, one per step.",
        "",
        f"### Validation and test loss at iteration {n}",
        "",
        eval_table(results),
        "",
        "The kit validates the same first batches every time (`helpers/runtime/evaluation.py`, `validation.jsonl`). "
        "Megatron-LM validates inside its loop at iteration N from where its validation iterator stands (the first "
        "batches in a run started at 0; on a resume, after the passes the checkpoint's `consumed_valid_samples` "
        "counts) and once more after the loop on the batches that follow; with `--skip-train` only after it, from "
        "the first. The pass compared is named in the table. Bridge's validation pass reads other batches than the "
        "kit's (its test pass, from the same first samples, agrees with the kit's), so its validation column is "
        "not a check of the weights.",
        "",
        "The job trains at lr 3e-4: at 1e-3 this small model spikes near iteration 10 (loss twice its trend, grad "
        "norm above 100) in both loops, one iteration apart, because a bf16 rounding difference decides when; the "
        "runs agreed within 5e-5 up to the spike, and the resumes agreed within 4e-5 after it.",
    ]
    failed = failures(results)
    if failed:
        lines += ["", "### Failures", "", failed]
    edits = results.get("megatron_lm_edits") or []
    lines += ["", "## What the benchmark changes, and why", "",
              "`megatron-lm.sh` is written for GPUs with Transformer Engine and apex. This image has neither, so "
              "`for_this_image()` changes its `pretrain_gpt.py` arguments to the kernels the kit's GPU job ran "
              "(one stays different: the kit accumulates weight gradients into fp32 inside the GEMM, Megatron-LM "
              "without apex in bf16 followed by an add):", ""]
    lines += [f"- {e}" for e in edits] or ["- (not recorded: step 2 did not reach the script)"]
    lines += ["- `--save` of every Megatron-LM run points into that run's own folder under OUT; steps 3 and 4 add "
              "`--load` (and step 3 `--skip-train`) with `--exit-on-missing-checkpoint`, so a checkpoint Megatron-LM "
              "cannot find stops the run instead of training from scratch.",
              f"- Steps 4 and 6 load a copy of the kit's `iter_{half:07d}` in a folder whose tracker "
              f"(`latest_checkpointed_iteration.txt`) names {half}: the kit's tracker names its latest checkpoint, N.",
              "",
              "Megatron-Core's dataset helper: Megatron-LM's `initialize_megatron` and Bridge's initialisation run "
              "`compile_helpers()`, which runs `make` in `megatron/core/datasets`; the megatron-core wheel ships that "
              "folder with the helper compiled (`helpers_cpp`) and no Makefile, so make fails and Megatron-LM exits. "
              "The benchmark writes a Makefile with an empty default target into that folder of the installed "
              f"package before anything starts ({makefile_said}).",
              "",
              "Carried to the GPU machine as wheels in `.whl/` (`pip install --no-deps --target /tmp/site`), on top of the "
              "image's torch 2.11.0+cu130: " + ", ".join(carried_wheels) + ". Also carried: `.megatron-lm/` (Megatron-LM "
              "core_r0.19.0's `pretrain_gpt.py`, `gpt_builders.py`, `model_provider.py`) and `.kitdata/` "
              "(WikiText-2 raw's valid and test files; without a train file the kit trains on the first 90% of the "
              "valid file's articles and validates on the rest)."]
    return "\n".join(lines) + "\n"
