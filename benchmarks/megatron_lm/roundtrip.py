"""Megatron-LM's own pretrain_gpt.py and Megatron-Bridge's pretrain against the kit's job on one GPU, and
through each other's checkpoints.

On the GPU machine, from the repository root, carry [".whl", ".megatron-lm", ".kitdata"] (the wheels of
CARRIED_WHEELS in .whl/, Megatron-LM core_r0.19.0's pretrain_gpt.py, gpt_builders.py and model_provider.py
in .megatron-lm/, WikiText-2 raw's valid and test files in .kitdata/wikitext-2-raw-v1/), device timeout 600 s:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD KIT_DATA_DIR=$PWD/.kitdata MEGATRON_LM=$PWD/.megatron-lm NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 || exit; python3 -m benchmarks.megatron_lm.roundtrip --out /tmp/roundtrip --iters 20 --resume-iters 10 --budget-s 530 --bundle $OUT

(--bundle copies results.json and logs.tar.gz, the runs' text files, into $OUT; the checkpoints stay in
/tmp/roundtrip.) Then, on any machine:

    python -m benchmarks.megatron_lm.roundtrip --write-page RESULTS.json    # docs/results/megatron_lm_roundtrip.md

The job: the kit's tiny-gpt preset at hidden 256 (4 layers, 4 heads, FFN 256, vocabulary 512, RoPE, no
biases), WikiText-2 raw through the byte tokenizer, sequence 256, micro batch 4, global batch 16, lr 3e-4
constant, bf16, Megatron's local attention (`--attention megatron_local`: the DotProductAttention of
Megatron-LM's `--transformer-impl local`, so both sides run the same attention kernels) and Megatron's
cross entropy (`--cross-entropy megatron`), N iterations
(--iters), checkpoints at N/2 (--resume-iters) and N. Steps, each a subprocess whose stdout and stderr
are kept in OUT/<run>/:

 1. kit: the kit's job (`python -m helpers ...`), from its own random initialisation
    (`--no-seed-checkpoint`: built at world size 1 on the GPU after Megatron's seeding with seed 1234, as
    Megatron-LM's is; whether the weights come out equal, iteration 1 of step 2 shows), saving at N/2 and
    N into its run directory; it writes megatron-lm.sh and bridge_recipe.py there.
 2. megatron_lm: that megatron-lm.sh run by Megatron-LM's pretrain_gpt.py from scratch, with the edits of
    `for_this_image` and --save pointed at OUT/megatron_lm/checkpoints (it saves at N/2 and N there);
    its log's iteration lines give the loss per iteration (the second line of a run prints the mean of
    the run's first two iterations: see parse_megatron_log), its "validation loss at" lines the
    validation and test losses.
 3. megatron_lm_eval_kit: the same command with `--load <the kit's checkpoints> --skip-train`:
    Megatron-LM evaluates the kit's iteration-N weights on its validation and test sets (from their first
    sample, the kit's eval_iters global batches), against the kit's own validation.jsonl at N.
 4. megatron_lm_resume_kit: Megatron-LM resuming the kit's N/2 checkpoint (a copy under
    OUT/kit_checkpoint_at_half whose tracker names N/2) and training to N; kit_resume_kit: the kit
    resuming the same checkpoint (`--load-dir <run>/checkpoints/iter_<N/2>`). Their losses N/2+1..N
    against each other and against the kit's uninterrupted run.
 5. kit_resume_megatron_lm: the kit resuming Megatron-LM's N/2 checkpoint of step 2 and training to N,
    against Megatron-LM's own iterations N/2+1..N.
 6. bridge_resume_kit: Megatron-Bridge's `pretrain(config(), forward_step)` on the kit's
    bridge_recipe.py (imported as benchmarks/speed/bridge_loop.py imports it, with its MACHINE_FIELDS),
    its checkpoint load set to the copy of step 4 and its save to OUT/bridge_resume_kit/checkpoints,
    training to N; its losses (a Bridge callback) against the kit's.
Every Megatron-LM and Bridge run saves only into its own folder under OUT, never into a kit run directory.
A step whose input is missing (an earlier step failed) is recorded as failed with the reason and the
others still run; OUT/results.json is rewritten after every step. Steps share --budget-s: each gets
at most what is left.

Megatron-Core's dataset helper: Megatron-LM's initialize_megatron (and Bridge's) runs
megatron.core.datasets.utils.compile_helpers(), i.e. `make -C <megatron/core/datasets>`; the
megatron-core wheel ships that folder with helpers_cpp already compiled and no Makefile, so make fails and
Megatron-LM exits. `datasets_makefile()` writes a Makefile whose default target does nothing into that
folder of the installed package (where none exists) and records it in results.json.

Writes OUT/results.json (every run's command, exit code, losses per iteration, validation/test losses,
what it loaded; the comparisons with their largest relative difference; date, GPU, versions) and prints the
tables side by side (the runs, the pairs compared, the tables and the page: roundtrip_page.py).

    python -m torch.distributed.run --standalone --nproc-per-node 1 -m benchmarks.megatron_lm.roundtrip \\
        --bridge RECIPE --load DIR --save DIR --result FILE    (step 6's process, which the driver starts)
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from helpers.launch.torchrun import kill_group
from benchmarks.megatron_lm.roundtrip_page import BF16_BOUND, RUNS, comparisons, render_page, text_tables
from helpers.rundir.megatron_lm_log import parse_megatron_log

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGE = REPO_ROOT / "docs" / "results" / "megatron_lm_roundtrip.md"

# The device command, as the docstring gives it (one line, under the device tool's 2,000 characters)
DEVICE_COMMAND = next(line.strip() for line in __doc__.splitlines() if line.strip().startswith("python3 -m pip install"))

# ---- the job (step 1) -----------------------------------------------------------------------------------
MODEL, MODEL_OVERRIDES = "tiny-gpt", {"hidden_size": 256}
# lr 3e-4: at 1e-3 this small model spikes (loss x2, grad norm > 100) near iteration 10, where a
# rounding difference decides on which iteration, and no two implementations can follow each other
SEQ_LEN, MICRO_BATCH, GLOBAL_BATCH, LR = 256, 4, 16, 3e-4
# NVLink multicast off in every process started here (the GPU machine's rule)
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
STEP_CAP_S = {"kit": 300, "megatron_lm": 240, "bridge": 300}  # one step's limit, within what --budget-s leaves

# The wheels carried in .whl/ (on top of the GPU image's torch 2.11.0+cu130 and the rest of its packages)
CARRIED_WHEELS = [
    "megatron-core 0.19.2", "megatron-bridge 0.6.2", "transformers 5.12.1", "tokenizers 0.22.2",
    "huggingface_hub 1.33.0", "safetensors 0.8.0", "tensorboard 2.21.0", "omegaconf 2.4.0",
    "antlr4-python3-runtime 4.9.3 (pip wheel --no-deps)", "nvidia-resiliency-ext 0.7.0", "nvidia-ml-py 13.615.71",
    "defusedxml 0.7.1", "nvidia-modelopt 0.47.0", "pulp 3.3.2", "datasets 5.2.0", "dill 0.4.1",
    "multiprocess 0.70.19", "pydantic 2.14.4", "pydantic-core 2.50.5", "annotated-types 0.8.0",
    "typing-inspection 0.4.5"]

# ---- Megatron-LM on this GPU image ---------------------------------------------------------------------
FUSIONS_OFF = ["--no-gradient-accumulation-fusion", "--no-persist-layer-norm", "--no-masked-softmax-fusion",
               "--no-bias-swiglu-fusion", "--no-bias-gelu-fusion", "--no-rope-fusion"]
AS_THE_KIT = ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "native"]


def for_this_image(argv: list[str]) -> tuple[list[str], list[str]]:
    """megatron-lm.sh's pretrain_gpt.py arguments as this GPU image runs them, and one line per change.

    The script is written for GPUs with Transformer Engine and apex: `--transformer-impl
    transformer_engine`, and Megatron-LM's own defaults for the fused kernels (the kit leaves them to
    Megatron-LM: helpers/rundir/megatron_flags.py MACHINE). The image has neither package. So:
      --transformer-impl local   Megatron's local layer spec (torch modules), the spec the kit's job used,
                                 and Megatron's local DotProductAttention, which --attention megatron_local
                                 gave the kit's job;
      the six --no-*-fusion / --no-persist-layer-norm flags   apex's fused weight-gradient accumulation,
                                 persistent LayerNorm and masked softmax, the jit-fused bias+activation and
                                 the fused RoPE: off, as in the kit's job (its bias+dropout fusion stays on,
                                 Megatron-LM's default and the kit's on GPU: a torch-compiled function);
      --cross-entropy-loss-fusion --cross-entropy-fusion-impl native   Megatron's torch-compiled
                                 vocab-parallel cross entropy, which the kit's job is given
                                 (--cross-entropy megatron) instead of its own Triton kernels.
    One kernel stays different: the kit accumulates weight gradients into fp32 main_grad inside the GEMM
    (its stand-in for apex's fused kernel, helpers/runtime/layers/wgrad_accumulation.py); Megatron-LM without
    apex computes them in bf16 and adds them to main_grad. Nothing else changes: model, layout, batch,
    optimizer, schedule, data and tokenizer stay as written."""
    out, notes = list(argv), []
    if "--transformer-impl" in out:
        i = out.index("--transformer-impl")
        if out[i + 1] != "local":
            notes.append(f"--transformer-impl {out[i + 1]} -> local (no Transformer Engine on this image; the local "
                         "layer spec and DotProductAttention the kit's job ran)")
            out[i + 1] = "local"
    else:
        out += ["--transformer-impl", "local"]
        notes.append("--transformer-impl local added (the local layer spec the kit's job ran)")
    added = [f for f in FUSIONS_OFF if f not in out]
    out += added
    if added:
        notes.append(" ".join(added) + " appended (no apex or Transformer Engine kernels here; off in the kit's job)")
    if "--cross-entropy-loss-fusion" not in out:
        out += AS_THE_KIT
        notes.append(" ".join(AS_THE_KIT) + " appended (the kit's GPU job computes its loss with this kernel)")
    return out, notes


def with_option(argv: list[str], option: str, value: str | None = None) -> list[str]:
    """argv with `option` set to `value` (replaced where present, else appended); value None: a switch."""
    out = list(argv)
    if option in out:
        i = out.index(option)
        if value is not None:
            out[i + 1] = value
        return out
    return out + ([option] if value is None else [option, value])


def option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def datasets_makefile() -> dict:
    """A Makefile with an empty default target in the installed megatron/core/datasets, where none exists.

    Megatron-LM's initialize_megatron (megatron/training/initialize.py) and Bridge's initialize call
    megatron.core.datasets.utils.compile_helpers() on rank 0, which runs `make -C` that folder and exits
    the job when make fails. The megatron-core wheel ships the folder with the helper already compiled
    (helpers_cpp*.so) but without the Makefile the source tree has, so make stops ("No targets specified
    and no makefile found") and so does Megatron-LM. With this Makefile make succeeds doing nothing and
    the compiled helper is imported as shipped. The folder is found through the `megatron` package's
    search path, without importing megatron.core, in sys.path order (PYTHONPATH first: the wheel installed
    with --target)."""
    spec = importlib.util.find_spec("megatron")
    folders = [Path(p) / "core" / "datasets" for p in (spec.submodule_search_locations or [])] if spec else []
    folder = next((f for f in folders if (f / "utils.py").exists()), None)
    if folder is None:
        return {"error": "megatron/core/datasets not found on sys.path"}
    makefile = folder / "Makefile"
    info = {"folder": str(folder), "compiled_helper": sorted(p.name for p in folder.glob("helpers_cpp*.so"))}
    if makefile.exists():
        return dict(info, written=False, note="a Makefile is there already; left as it is")
    try:
        makefile.write_text("# Written by benchmarks/megatron_lm/roundtrip.py: the helper (helpers_cpp) ships compiled\n"
                            "# in the megatron-core wheel; compile_helpers() only needs make to succeed.\n"
                            ".PHONY: all\nall:\n\t@true\n")
    except OSError as e:
        return dict(info, error=f"could not write {makefile}: {e}")
    return dict(info, written=True, makefile=str(makefile))


# ---- parsing the logs: helpers/rundir/megatron_lm_log.py parse_megatron_log ----------------------------------


def megatron_eval(evals: list[dict], n: int, trained: bool) -> tuple[dict | None, dict | None]:
    """(validation, test) of Megatron-LM at iteration n. Trained runs validate inside the loop at n
    ("iteration n": the validation iterator's first eval_iters batches after a fresh start) and again
    after it ("iteration n on validation set", the batches that follow); --skip-train validates once
    ("iteration n on validation set", from the first batch). The pass compared is the one that read the
    first batches, as the kit's validation does."""
    def at(e):
        m = re.match(r"iteration (\d+)", e["at"])
        return dict(e, iteration=int(m.group(1))) if m else dict(e)

    if trained:
        valid = next((at(e) for e in evals if e["at"] == f"iteration {n}"), None)
    else:  # the iteration it names is the checkpoint's
        valid = next((at(e) for e in evals if e["at"].endswith("on validation set")), None)
    test = next((at(e) for e in evals if e["at"].endswith("on test set")), None)
    return valid, test


def read_kit_run(run_dir: Path, n: int) -> dict:
    """metrics.jsonl (loss and grad norm per iteration), validation.jsonl (the validation and test passes at
    n), resumed.json, and the data source the kit pinned (data.json)."""
    out = {"run_dir": str(run_dir), "iterations": [], "losses": [], "grad_norms": []}
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            if line.strip():
                m = json.loads(line)
                out["iterations"].append(m["iteration"])
                out["losses"].append(m["loss"])
                out["grad_norms"].append(m.get("grad_norm"))
    evals = [json.loads(x) for x in (run_dir / "validation.jsonl").read_text().splitlines() if x.strip()] \
        if (run_dir / "validation.jsonl").exists() else []
    out["evals"] = evals
    out["valid"] = next((e for e in reversed(evals) if e["split"] == "valid" and e["iteration"] == n), None)
    out["test"] = next((e for e in reversed(evals) if e["split"] == "test" and e["iteration"] == n), None)
    for name, key in (("resumed.json", "loaded"), ("data.json", "data")):
        p = run_dir / name
        if p.exists():
            record = json.loads(p.read_text())
            out[key] = record if key == "loaded" else {"origin": record["source"]["origin"],
                                                        "splits": record["source"]["splits"]}
    manifest = run_dir / "manifest.json"
    if manifest.exists():
        out["versions"] = json.loads(manifest.read_text()).get("versions")
    return out


# ---- running one step --------------------------------------------------------------------------------------
def run_logged(argv: list[str], folder: Path, env: dict, timeout_s: float, cwd: Path = REPO_ROOT) -> dict:
    """Run argv with stdout and stderr into stdout.txt and stderr.txt of `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    out_p, err_p = folder / "stdout.txt", folder / "stderr.txt"
    t0 = time.time()
    with out_p.open("w") as out, err_p.open("w") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=cwd, start_new_session=True)
        try:
            rc, timed_out = proc.wait(timeout=timeout_s), False
        except subprocess.TimeoutExpired:
            kill_group(proc)
            rc, timed_out = proc.returncode, True
    record = {"command": argv, "rc": rc, "timed_out": timed_out, "timeout_s": round(timeout_s),
              "wall_s": round(time.time() - t0, 1), "stdout": str(out_p), "stderr": str(err_p)}
    if timed_out:
        record["error"] = f"stopped after {timeout_s:.0f} s (its time limit)\n" + tail(out_p, err_p)
    elif rc != 0:
        record["error"] = f"exit code {rc}\n" + tail(out_p, err_p)
    return record


def tail(out_p: Path, err_p: Path, chars: int = 3000) -> str:
    parts = []
    for p in (err_p, out_p):
        text = p.read_text(errors="replace") if p.exists() else ""
        if text.strip():
            parts.append(f"--- {p.name} (last {chars} characters) ---\n{text[-chars:]}")
    return "\n".join(parts)


class Missing(Exception):
    """A step's input is not there (the step that makes it failed)."""


class Driver:
    def __init__(self, args):
        self.a, self.out = args, args.out.resolve()
        self.n, self.half = args.iters, args.resume_iters
        self.t0 = time.time()
        self.runs: dict[str, dict] = {}
        self.env = dict(os.environ, **SAFE_ENV, PYTHONUNBUFFERED="1", KIT_CACHE_DIR=str(self.out / "cache"))
        self.megatron_lm = Path(os.environ.get("MEGATRON_LM", ".megatron-lm")).resolve()
        self.meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                     "command": " ".join(["python -m benchmarks.megatron_lm.roundtrip"]
                                         + ["OUT" if x == str(args.out) else x for x in sys.argv[1:]])}
        self.megatron_lm_edits: list[str] = []

    # ---- time ----
    def left_s(self) -> float:
        return self.a.budget_s - (time.time() - self.t0)

    def limit(self, kind: str) -> float:
        left = self.left_s() - 10
        if left < 30:
            raise Missing(f"out of time: {self.left_s():.0f} s of --budget-s {self.a.budget_s} left")
        return min(STEP_CAP_S[kind], left)

    # ---- results ----
    def save(self) -> None:
        results = {**self.meta, "iters": self.n, "resume_iters": self.half, "bf16_bound": BF16_BOUND,
                   "job": {"model": MODEL, "model_overrides": MODEL_OVERRIDES, "seq_len": SEQ_LEN,
                           "micro_batch": MICRO_BATCH, "global_batch": GLOBAL_BATCH, "lr": LR, "precision": "bf16",
                           "attention": "megatron_local", "cross_entropy": "megatron", "data": "wikitext",
                           "tokenizer": "byte"},
                   "megatron_lm_edits": self.megatron_lm_edits, "runs": self.runs,
                   "comparisons": comparisons(self.runs, self.n)}
        text = json.dumps(results, indent=1, default=str).replace(str(self.out), "OUT")
        (self.out / "results.json").write_text(text)

    def step(self, key: str, fn) -> None:
        step, what, _ = RUNS[key]
        print(f"[{time.time() - self.t0:5.0f} s] step {step} {key}: {what}", flush=True)
        try:
            record = fn()
        except Missing as e:
            record = {"error": f"not run: {e}"}
        except Exception as e:  # keep going: the other steps still answer
            record = {"error": f"{type(e).__name__}: {e}"}
        if "error" not in record and not record.get("losses") and not record.get("valid"):
            record["error"] = "finished without a loss in its log (see its stdout.txt/stderr.txt)"
        self.runs[key] = {"step": step, "what": what, **record}
        self.save()
        if "error" in record:
            print(f"    FAILED: {record['error'][:2000]}", flush=True)
        else:
            last = (record.get("losses") or [None])[-1]
            print(f"    ok in {record.get('wall_s')} s; last loss {last}; valid {(record.get('valid') or {}).get('loss')}",
                  flush=True)

    # ---- the kit ----
    def kit_argv(self, key: str, load_dir: Path | None, save: bool, timeout_s: float) -> list[str]:
        """The kit's command line. Its --timeout-s ends 15 s before this step's limit: the kit starts torchrun
        in a process group of its own, which it stops itself at its timeout, and which stopping the CLI's
        group here would not reach."""
        argv = [sys.executable, "-m", "helpers", "--model", MODEL]
        for k, v in MODEL_OVERRIDES.items():
            argv += ["--model-overrides", f"{k}={v}"]
        argv += ["--data", "wikitext", "--tokenizer", "byte", "--seq-len", str(SEQ_LEN), "--micro-batch",
                 str(MICRO_BATCH), "--global-batch", str(GLOBAL_BATCH), "--lr", str(LR), "--iters", str(self.n),
                 "--precision", "bf16", "--device", "cuda", "--attention", "megatron_local", "--cross-entropy",
                 "megatron", "--no-seed-checkpoint",
                 "--name", key, "--out", str(self.out / key / "runs"), "--timeout-s", str(int(timeout_s - 15))]
        if save:
            argv += ["--save-interval", str(self.half)]
        if load_dir is not None:
            argv += ["--load-dir", str(load_dir)]
        return argv

    def kit(self, key: str, load_dir: Path | None = None, save: bool = False) -> dict:
        if load_dir is not None and not load_dir.exists():
            raise Missing(f"no checkpoint at {load_dir}")
        timeout = self.limit("kit")
        record = run_logged(self.kit_argv(key, load_dir, save, timeout), self.out / key, self.env, timeout)
        run_dir = self.kit_run_dir(key)
        if run_dir is not None:
            record.update(read_kit_run(run_dir, self.n))
        elif "error" not in record:
            record["error"] = "no run directory"
        return record

    def kit_run_dir(self, key: str) -> Path | None:
        """The last line the CLI prints is the run directory; on a failure, the newest one under --out."""
        lines = (self.out / key / "stdout.txt").read_text(errors="replace").strip().splitlines()
        if lines and Path(lines[-1].strip()).is_dir():
            return Path(lines[-1].strip())
        dirs = sorted((self.out / key / "runs").glob(f"{key}-*"), key=lambda p: p.stat().st_mtime)
        return dirs[-1] if dirs else None

    def kit_file(self, name: str) -> Path:
        run_dir = self.runs.get("kit", {}).get("run_dir")
        if not run_dir or not (Path(run_dir) / name).exists():
            raise Missing(f"step 1 (the kit's job) left no {name}")
        return Path(run_dir) / name

    def kit_checkpoint(self, iteration: int) -> Path:
        path = self.kit_file("checkpoints") / f"iter_{iteration:07d}"
        if not path.is_dir():
            raise Missing(f"the kit's run has no {path.name} (step 1 did not save it)")
        return path

    def kit_checkpoint_at_half(self) -> Path:
        """A folder whose tracker names N/2, holding a copy of the kit's iter_<N/2> (Megatron-LM and Bridge
        read the tracker; the kit's run directory is only read)."""
        root = self.out / "kit_checkpoint_at_half"
        src = self.kit_checkpoint(self.half)
        if not (root / src.name).is_dir():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            shutil.copytree(src, root / src.name, symlinks=True)
            (root / "latest_checkpointed_iteration.txt").write_text(f"{self.half}\n")
        return root

    # ---- Megatron-LM ----
    def megatron_lm_argv(self) -> list[str]:
        from helpers.rundir import megatron_lm

        argv, notes = for_this_image(megatron_lm.arguments(self.kit_file("megatron-lm.sh")))
        self.megatron_lm_edits = notes
        return argv

    def run_megatron_lm(self, key: str, argv: list[str], trained: bool) -> dict:
        script = self.megatron_lm / "pretrain_gpt.py"
        if not script.exists():
            raise Missing(f"no {script} (MEGATRON_LM)")
        argv = with_option(argv, "--save", str(self.out / key / "checkpoints"))
        timeout = self.limit("megatron_lm")
        env = dict(self.env, CUDA_DEVICE_MAX_CONNECTIONS="1")  # what megatron-lm.sh exports
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", str(script), *argv]
        record = run_logged(cmd, self.out / key, env, timeout, cwd=self.out / key)  # anything it writes stays there
        parsed = parse_megatron_log(Path(record["stdout"]).read_text(errors="replace") + "\n"
                                    + Path(record["stderr"]).read_text(errors="replace"))
        valid, test = megatron_eval(parsed["evals"], self.n, trained)
        record.update(parsed, valid=valid, test=test, shell=shlex.join(["torchrun", "--nproc-per-node", "1",
                                                                         "$MEGATRON_LM/pretrain_gpt.py", *argv]))
        return record

    def megatron_lm_scratch(self) -> dict:
        argv = self.megatron_lm_argv()
        if option(argv, "--save-interval") is None:
            argv += ["--save-interval", str(self.half)]
            self.megatron_lm_edits.append(f"--save-interval {self.half} added (megatron-lm.sh had none)")
        return self.run_megatron_lm("megatron_lm", argv, trained=True)

    def megatron_lm_eval_kit(self) -> dict:
        argv = self.megatron_lm_argv() + ["--load", str(self.kit_file("checkpoints")), "--skip-train",
                                          "--exit-on-missing-checkpoint"]
        return self.run_megatron_lm("megatron_lm_eval_kit", argv, trained=False)

    def megatron_lm_resume_kit(self) -> dict:
        argv = self.megatron_lm_argv() + ["--load", str(self.kit_checkpoint_at_half()), "--exit-on-missing-checkpoint"]
        return self.run_megatron_lm("megatron_lm_resume_kit", argv, trained=True)

    def kit_resume_megatron_lm(self) -> dict:
        path = self.out / "megatron_lm" / "checkpoints" / f"iter_{self.half:07d}"
        if not path.is_dir():
            raise Missing(f"Megatron-LM's run (step 2) left no {path.name} in OUT/megatron_lm/checkpoints")
        return self.kit("kit_resume_megatron_lm", load_dir=path)

    # ---- Megatron-Bridge ----
    def bridge_resume_kit(self) -> dict:
        key = "bridge_resume_kit"
        recipe = self.kit_file("bridge_recipe.py")
        load = self.kit_checkpoint_at_half()
        folder = self.out / key
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(recipe, folder / "bridge_recipe.py")
        result = folder / "bridge_result.json"
        timeout = self.limit("bridge")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
               "-m", "benchmarks.megatron_lm.roundtrip", "--bridge", str(folder / "bridge_recipe.py"),
               "--load", str(load), "--save", str(folder / "checkpoints"), "--result", str(result)]
        record = run_logged(cmd, folder, dict(self.env, PYTHONWARNINGS="ignore"), timeout)
        if result.exists():
            r = json.loads(result.read_text())
            failed = r.pop("error", None)  # Bridge's exception, before the process's own output tail
            record.update(r)
            if failed:
                record["error"] = failed + "\n" + record.get("error", "")
            record["valid"] = next((dict(e, at="validation") for e in r.get("evals", []) if e["iteration"] == self.n), None)
            record["test"] = next((dict(e, at="test") for e in r.get("tests", [])), None)
        parsed = parse_megatron_log(Path(record["stdout"]).read_text(errors="replace"))
        record["loaded"] = parsed["loaded"]
        record["log_evals"] = parsed["evals"]
        return record

    # ---- the whole flow ----
    def run(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        try:
            self.meta.update(environment(self.megatron_lm))
        except Exception as e:  # the steps still run; their own logs name the GPU
            self.meta["environment_error"] = f"{type(e).__name__}: {e}"
        self.meta["datasets_makefile"] = datasets_makefile()
        self.save()
        self.step("kit", lambda: self.kit("kit", save=True))
        self.step("megatron_lm", self.megatron_lm_scratch)
        self.step("megatron_lm_eval_kit", self.megatron_lm_eval_kit)
        self.step("megatron_lm_resume_kit", self.megatron_lm_resume_kit)
        self.step("kit_resume_kit", lambda: self.kit("kit_resume_kit", load_dir=self.kit_checkpoint(self.half)))
        self.step("kit_resume_megatron_lm", self.kit_resume_megatron_lm)
        self.step("bridge_resume_kit", self.bridge_resume_kit)
        self.meta["wall_s"] = round(time.time() - self.t0, 1)
        self.save()
        print(text_tables(json.loads((self.out / "results.json").read_text())))


def environment(megatron_lm: Path) -> dict:
    """GPU name (torch.cuda.get_device_name), versions, the Megatron-LM files' SHA-256, the kit's revision."""
    import torch

    def version(pkg):
        try:
            return importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            return None

    out = {"gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
           "versions": {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
                        **{p: version(p) for p in ("megatron-core", "megatron-bridge", "transformers", "tokenizers",
                                                   "transformer-engine", "apex")}},
           "megatron_lm": {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16]
                           for p in sorted(megatron_lm.glob("*.py"))},
           "megatron_lm_branch": "core_r0.19.0"}
    try:
        out["kit_revision"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                                             text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        out["kit_revision"] = None
    return out


# ---- the Bridge side, in the torchrun process ---------------------------------------------------------------
def bridge_main(recipe_path: str, load: str, save: str, result: str) -> None:
    """Bridge's pretrain on the recipe with its checkpoint load and save replaced; each step's loss and
    grad norm, every validation and test pass (a Bridge callback) into `result` (rank 0), also on failure."""
    from benchmarks.speed.bridge_loop import MACHINE_FIELDS, import_bridge, skip_built_helpers

    pretrain, forward_step, Callback, _, recipe = import_bridge(recipe_path)
    skip_built_helpers()
    record = {"iterations": [], "losses": [], "grad_norms": [], "evals": [], "tests": []}

    def lm(losses):
        value = (losses or {}).get("lm loss")
        return None if value is None else float(value)

    class Record(Callback):
        def on_train_step_end(self, context):  # train_state.step advances after this callback
            record["iterations"].append(int(context.state.train_state.step) + 1)
            record["losses"].append(float(context.loss_dict["lm loss"]))
            record["grad_norms"].append(None if context.grad_norm is None else float(context.grad_norm))

        def on_eval_end(self, context):
            record["evals"].append({"iteration": int(context.state.train_state.step), "loss": lm(context.total_loss_dict)})

        def on_test_end(self, context):
            record["tests"].append({"iteration": int(context.state.train_state.step), "loss": lm(context.total_loss_dict)})

    cfg = recipe.config()
    for name, value in MACHINE_FIELDS.items():
        setattr(cfg.model, name, value)
    cfg.checkpoint.load = load
    cfg.checkpoint.save = save
    record["set_on_config"] = {"model": MACHINE_FIELDS, "checkpoint.load": load, "checkpoint.save": save}
    record["checkpoint_config"] = {k: getattr(cfg.checkpoint, k, None) for k in
                                   ("load", "save", "save_interval", "load_optim", "load_rng", "ckpt_format")}
    try:
        pretrain(cfg, forward_step, callbacks=[Record()])
    except BaseException as e:
        record["error"] = f"{type(e).__name__}: {e}"
        raise
    finally:
        if int(os.environ.get("RANK", "0")) == 0:
            Path(result).write_text(json.dumps(record, default=str))


# ---- the bundle that comes back from the GPU machine ---------------------------------------------------------
BUNDLE_SUFFIXES = {".txt", ".log", ".json", ".jsonl", ".sh", ".py", ".yaml"}
BUNDLE_SKIP_DIRS = {"checkpoints", "cache", "kit_checkpoint_at_half", "index-cache"}


def bundle(out: Path, into: Path, max_file: int = 2 << 20) -> None:
    """results.json and logs.tar.gz (every small text file under out: the steps' stdout/stderr, the kit's run
    directories without checkpoints) into `into`."""
    into.mkdir(parents=True, exist_ok=True)
    if (out / "results.json").exists():
        shutil.copy(out / "results.json", into / "results.json")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in sorted(out.rglob("*")):
            rel = p.relative_to(out)
            if (p.is_file() and p.suffix in BUNDLE_SUFFIXES and p.stat().st_size <= max_file
                    and not BUNDLE_SKIP_DIRS & set(rel.parts) and not any(x.startswith("iter_") for x in rel.parts)):
                tar.add(p, arcname=str(Path("roundtrip") / rel))
    (into / "logs.tar.gz").write_bytes(buf.getvalue())


# ---- the command line ---------------------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="working folder (run directories, checkpoints, logs, results.json)")
    ap.add_argument("--iters", type=int, default=20, help="N: iterations of every run")
    ap.add_argument("--resume-iters", type=int, default=10, help="N/2: the checkpoint the resumed runs start from")
    ap.add_argument("--budget-s", type=float, default=530, help="wall-clock seconds all steps share")
    ap.add_argument("--bundle", type=Path, help="afterwards copy results.json and logs.tar.gz into this folder")
    ap.add_argument("--write-page", type=Path, metavar="RESULTS_JSON",
                    help="render the results page from a results.json (CPU; nothing runs)")
    ap.add_argument("--page", type=Path, default=PAGE, help="with --write-page: where the page goes")
    ap.add_argument("--bridge", help="(torchrun process) the recipe Bridge trains")
    ap.add_argument("--load", help="(torchrun process) Bridge's checkpoint load folder")
    ap.add_argument("--save", help="(torchrun process) Bridge's checkpoint save folder")
    ap.add_argument("--result", help="(torchrun process) where rank 0 writes its record")
    a = ap.parse_args(argv)
    if a.bridge:
        bridge_main(a.bridge, a.load, a.save, a.result)
        return
    if a.write_page:
        results = json.loads(a.write_page.read_text())
        try:
            source = str(a.write_page.resolve().relative_to(REPO_ROOT))
        except ValueError:
            source = str(a.write_page)
        a.page.write_text(render_page(results, source, DEVICE_COMMAND, CARRIED_WHEELS))
        print(f"wrote {a.page}")
        return
    if a.out is None:
        ap.error("--out DIR is required (or --write-page RESULTS_JSON)")
    if not 0 < a.resume_iters < a.iters:
        ap.error("--resume-iters must lie between 0 and --iters")
    data = os.environ.get("KIT_DATA_DIR")
    if not data or not (Path(data) / "wikitext-2-raw-v1" / "wiki.valid.raw").exists():
        ap.error("KIT_DATA_DIR must name a folder holding wikitext-2-raw-v1/wiki.valid.raw and wiki.test.raw "
                 "(without it the kit would train on its generated corpus)")
    driver = Driver(a)
    try:
        driver.run()
    finally:
        if a.bundle:
            bundle(driver.out, a.bundle)


if __name__ == "__main__":
    main()
