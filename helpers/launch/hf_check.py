"""Check an HF import before training with it: one torchrun job builds the model in each
given layout and compares its logits with `transformers` (helpers/runtime/hf/parity.py).

    hf_check.parity("path/to/hf", [dict(tp=2), dict(pp=2), dict(tp=2, sp=True)], nproc=2)
    -> [{"layout": "tp2", "max_rel_diff": 4e-7, "argmax_disagreement": 0.0, "export_identical": True}, ...]

A layout may name its own `hf_model` (several models checked in one job). Every layout is
validated against the imported config first (helpers/job/rules: the same named rules a training
job meets). `check_export=False` skips the export (large models). With `load_dir` (a kit
checkpoint of this architecture, e.g. the one a job saved before exporting to `hf_model`), the
checkpoint's weights are compared instead. On `device="cuda"` both sides run in bf16."""
from __future__ import annotations

import dataclasses
import json

from helpers.job import paths, rules
from helpers.job.spec import JobSpec
from helpers.launch import environment, runner
from helpers.rundir import names


def parity(hf_model: str, layouts: list[dict], nproc: int, load_dir: str | None = None, seq_len: int = 32,
           out: str | None = None, timeout_s: float = 300, device: str = "cpu", env: dict | None = None,
           check_export: bool = True) -> list[dict]:
    base = JobSpec(hf_model=hf_model, nproc=nproc, device=device, seq_len=seq_len, iters=0, load_dir=load_dir,
                   env=env or {},
                   out=out or str(paths.runs_dir()), timeout_s=timeout_s, name="hf-parity")
    env = environment.probe(device)
    cases = []
    for sizes in layouts:  # every layout meets the rules before any process starts
        case = runner.validate(dataclasses.replace(base, **{**sizes, "nproc": nproc, "load_dir": None}), env)
        cases.append({**sizes, "nproc": nproc, "hf_model": case.hf_model, "check_export": check_export})
    spec = rules.resolve(dataclasses.replace(base, hf_parity_layouts=cases), env)
    run_dir = runner.new_run_dir(spec, spec.model_preset())
    spec.write(run_dir / names.SPEC)
    runner.execute(run_dir, spec)
    return json.loads((run_dir / names.HF_PARITY).read_text())
