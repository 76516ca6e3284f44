"""Check an HF import before training with it: one torchrun job builds the model in each
given layout and compares its logits with `transformers` (helpers/runtime/hf/parity.py).

    hf_check.parity("path/to/hf", [dict(tp=2), dict(pp=2), dict(tp=2, sp=True)], nproc=2)
    -> [{"layout": "tp2", "max_rel_diff": 4e-7, "argmax_disagreement": 0.0, "export_identical": True}, ...]

A layout may name its own `hf_model` (several models checked in one job), and its own
`check_export` / `check_grads` over the job's. `check_grads=True` also compares every parameter's
gradient after one backward with transformers' (`grad_max_rel_diff`, the worst tensors in
`grad_worst`). A case the worker fails on is recorded with its `error`. Every layout is
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
from helpers.rundir import names, prepared


def parity(hf_model: str, layouts: list[dict], nproc: int, load_dir: str | None = None, seq_len: int = 32,
           out: str | None = None, timeout_s: float = 300, device: str = "cpu", env: dict | None = None,
           check_export: bool = True, check_grads: bool = False) -> list[dict]:
    base = JobSpec(hf_model=hf_model, nproc=nproc, device=device, seq_len=seq_len, iters=0, load_dir=load_dir,
                   env=env or {},
                   out=out or str(paths.runs_dir()), timeout_s=timeout_s, name="hf-parity")
    env = environment.probe(device)
    cases, models, folders = [], {}, {}  # each HF folder read once (folders), its model in model.json (models)
    for layout in layouts:  # every layout meets the rules before any process starts
        checks = {"check_export": check_export, "check_grads": check_grads}
        sizes = {k: v for k, v in layout.items() if k not in checks}
        checks.update({k: v for k, v in layout.items() if k in checks})
        case = runner.checked(dataclasses.replace(base, **{**sizes, "nproc": nproc, "load_dir": None}), env,
                              folders=folders)
        folders[case.spec.hf_model] = case.hf
        models.setdefault(case.spec.hf_model, case)
        cases.append({**sizes, "nproc": nproc, "hf_model": case.spec.hf_model, **checks,
                      "attention": case.spec.attention})  # as resolved for that model (attention sinks: Megatron's)
    resolved = rules.resolve(dataclasses.replace(base, hf_parity_layouts=cases), env, folders=folders)
    if resolved.model is None:  # hf_model itself unusable (every layout named its own folder)
        rules.check(resolved, env).refuse()
    spec = resolved.spec
    run_dir = runner.new_run_dir(spec, resolved.model)
    runner.write_run_files(run_dir, resolved, [c for folder, c in models.items() if folder != spec.hf_model])
    runner.execute(run_dir, spec)
    return json.loads((run_dir / names.HF_PARITY).read_text())


def evaluated_samples(run, split: str = "valid") -> list[dict]:
    """The samples a run's validation (or test) passes evaluated: the first eval_iters global batches
    of that split of Megatron's dataset, rebuilt from the run's cache (the same tokens, in order)."""
    import logging
    import warnings

    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # "no CUDA runtime" on CPU hosts
    with warnings.catch_warnings():  # Megatron's import and its builder outside torch.distributed warn
        warnings.simplefilter("ignore")
        from helpers.runtime.data.indexed import Prepared  # Megatron's dataset builder, single process

        spec = run.spec
        dataset = Prepared(spec, prepared.data(run.path)).build()[split]
        return [dataset[i] for i in range(spec.eval_iters * spec.global_batch_size)]


def transformers_loss(run, split: str = "valid", folder=None) -> float:
    """transformers' mean loss (fp32, eager attention) on exactly the samples the run evaluated, on the
    HF folder the run imported: what the run's first validation pass must equal (every sample of a
    text source counts all its tokens, so the means compare directly). `folder`: another HF folder
    of the same model and tokenizer (a later job's export) asked on the same samples instead."""
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder or run.spec.hf_model, dtype=torch.float32,
                                                           attn_implementation="eager").eval()
    total = count = 0.0
    with torch.no_grad():
        for s in evaluated_samples(run, split):
            logits = hf(s["tokens"][None]).logits[0]
            losses = torch.nn.functional.cross_entropy(logits, s["labels"], reduction="none")
            total += float((losses * s["loss_mask"]).sum())
            count += float(s["loss_mask"].sum())
    return total / count
