"""Real Megatron-LM logs of a healthy run and of four runs that go wrong, for the lesson on reading logs.

One kit job writes its megatron-lm.sh (the roundtrip's job: tiny-gpt at hidden 256 on WikiText-2 raw,
byte tokenizer, sequence 256, micro batch 4, global batch 16, lr 3e-4 constant, bf16); Megatron-LM's own
pretrain_gpt.py then runs that script, edited as `roundtrip.for_this_image` says, once per case, each
case changing one thing:

  healthy              as written, --train-iters N
  loss_spike           --lr 1e-3 (this small model spikes near iteration 10 at that rate)
  skipped_iterations   --fp16 instead of --bf16: dynamic loss scaling from Megatron-LM's default initial
                       scale 2^32 overflows and skips iterations until the scale has come down
  nan                  --lr 1e6: the weights blow up to inf within a few steps; Megatron-LM's default
                       --check-for-nan-in-loss-and-grad stops the run at the first NaN loss
  nan_unchecked        the same with --no-check-for-nan-in-loss-and-grad: the run goes on, counting
                       "number of nan iterations"
  throughput_drop      as written, while a second process on the same GPU runs large matmuls from the
                       moment the log shows iteration N/3 for a few seconds (a neighbour on a shared GPU,
                       a thermal or clock drop, a slow node: the step time rises, the loss does not care)

The cases but the last run side by side (the GPU is far from busy with this model); the healthy run and
the throughput drop run alone, one after the other, so their step times are this GPU's own.

On the GPU machine, from the repository root, carry [".whl", ".megatron-lm", ".kitdata"] as for
roundtrip.py, device timeout 600 s:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD KIT_DATA_DIR=$PWD/.kitdata MEGATRON_LM=$PWD/.megatron-lm NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 || exit; python3 -m benchmarks.megatron_lm.log_gallery --out /tmp/gallery --iters 40 --budget-s 520 --bundle $OUT

Writes OUT/<case>/stdout.txt and stderr.txt and OUT/gallery.json (each case's command line as a shell line,
exit code, wall time; the GPU; versions). `--bundle` copies them into the given folder. The committed logs
(data/megatron_lm_logs/) are these stdout files from Megatron-LM's first training line on, with the
argument dump (several hundred lines) left out."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.megatron_lm import roundtrip

# case -> (what it shows, how the written arguments change)
CASES = {
    "healthy": ("the run as megatron-lm.sh writes it", []),
    "loss_spike": ("--lr 1e-3", [("--lr", "1e-3")]),
    "skipped_iterations": ("--fp16 instead of --bf16", [("--bf16", None), ("+--fp16", None)]),
    "nan": ("--lr 1e6", [("--lr", "1e6")]),
    "nan_unchecked": ("--lr 1e6 --no-check-for-nan-in-loss-and-grad",
                      [("--lr", "1e6"), ("+--no-check-for-nan-in-loss-and-grad", None)]),
    "throughput_drop": ("as written; a second process keeps the GPU busy with bf16 matmuls (8192 x 8192) "
                        "from iteration N/3 for HOG_S seconds", []),
}
SIDE_BY_SIDE = ["loss_spike", "skipped_iterations", "nan", "nan_unchecked"]
ALONE = ["healthy", "throughput_drop"]
HOG_S = 1.0

# The neighbour: waits for the training log to show the trigger iteration, then keeps the GPU busy.
HOG = """
import sys, time, torch
log, trigger, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
deadline = time.time() + 300
while time.time() < deadline:
    try:
        if trigger in open(log, errors="replace").read():
            break
    except OSError:
        pass
    time.sleep(0.02)
end = time.time() + seconds
while time.time() < end:
    for _ in range(8):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
print("hog done", flush=True)
"""


def edited(argv: list[str], changes) -> list[str]:
    out = list(argv)
    for name, value in changes:
        if name.startswith("+"):
            out.append(name[1:])
        elif value is None:
            out.remove(name)
        else:
            out = roundtrip.with_option(out, name, value)
    return out


class Gallery(roundtrip.Driver):
    def case(self, key: str, base: list[str], hog: bool = False) -> dict:
        argv = roundtrip.with_option(edited(base, CASES[key][1]), "--train-iters", str(self.n))
        argv = roundtrip.with_option(argv, "--save-interval", str(self.n))  # the run's --save needs one
        hog_proc = None
        if hog:
            folder = self.out / key
            folder.mkdir(parents=True, exist_ok=True)
            trigger = f"iteration {self.n // 3:8d}/"
            hog_proc = subprocess.Popen([sys.executable, "-c", HOG, str(folder / "stdout.txt"), trigger, str(HOG_S)],
                                        stdout=open(folder / "hog.txt", "w"), stderr=subprocess.STDOUT, env=self.env)
        try:
            record = self.run_megatron_lm(key, argv, trained=True)
        finally:
            if hog_proc is not None:
                try:
                    hog_proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    hog_proc.kill()
        return {"what": CASES[key][0], "shell": record["shell"], "rc": record["rc"], "wall_s": record["wall_s"],
                "error": record.get("error", "")[:1500], "iterations": len(record.get("iterations") or [])}

    def run(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.meta.update(roundtrip.environment(self.megatron_lm))
        self.meta["datasets_makefile"] = roundtrip.datasets_makefile()
        kit = self.kit("kit", save=False)
        self.runs["kit"] = kit
        if "error" in kit:
            print("the kit's job failed:", kit["error"][:3000], flush=True)
            return
        base = self.megatron_lm_argv()
        cases: dict[str, dict] = {}

        def one(key, hog=False):
            t = time.time()
            try:
                cases[key] = self.case(key, base, hog)
            except Exception as e:  # the other cases still run
                cases[key] = {"error": f"{type(e).__name__}: {e}"}
            print(f"[{time.time() - self.t0:5.0f} s] {key}: rc {cases[key].get('rc')} in {time.time() - t:.0f} s "
                  f"{cases[key].get('error', '')[:300]}", flush=True)

        threads = [threading.Thread(target=one, args=(k,)) for k in SIDE_BY_SIDE if k in self.a.cases]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for key in ALONE:
            if key in self.a.cases:
                one(key, hog=key == "throughput_drop")
        gallery = {**self.meta, "iters": self.n, "edits_for_this_image": self.megatron_lm_edits, "hog_s": HOG_S,
                   "cases": cases}
        (self.out / "gallery.json").write_text(json.dumps(gallery, indent=1, default=str).replace(str(self.out), "OUT"))


# ---- the committed logs -------------------------------------------------------------------------------------
LOGS = roundtrip.REPO_ROOT / "data" / "megatron_lm_logs"
# The arguments a reader of these logs needs; pretrain_gpt.py prints all of them (several hundred lines)
KEEP_ARGS = {"bf16", "fp16", "clip_grad", "data_parallel_size", "eval_interval", "global_batch_size", "hidden_size",
             "initial_loss_scale", "loss_scale", "log_interval", "lr", "lr_decay_style", "micro_batch_size",
             "num_layers", "pipeline_model_parallel_size", "save_interval", "seq_length",
             "tensor_model_parallel_size", "train_iters", "world_size", "check_for_nan_in_loss_and_grad"}


def trimmed(text: str) -> str:
    """A case's stdout as committed: every line as printed, in order, but the argument dump keeps
    only KEEP_ARGS; the GPU machine's folders read OUT and SITE."""
    out, in_args = [], False
    for line in text.splitlines():
        if "------------------------ arguments ------------------------" in line:
            in_args = True
        elif "end of arguments" in line:
            in_args = False
        elif in_args and line.split(" ", 3)[2:3] and line.strip().split(" ")[0] not in KEEP_ARGS:
            continue
        out.append(line.replace("/tmp/gallery", "OUT").replace("/tmp/site", "SITE"))
    return "\n".join(out) + "\n"


def commit(bundle: Path) -> None:
    """data/megatron_lm_logs/<case>.log from a bundle this script wrote on the GPU machine."""
    gallery = json.loads((bundle / "gallery.json").read_text())
    LOGS.mkdir(parents=True, exist_ok=True)
    for case, record in gallery["cases"].items():
        stdout = bundle / case / "stdout.txt"
        if stdout.exists():
            (LOGS / f"{case}.log").write_text(trimmed(stdout.read_text(errors="replace")))
            print(f"{case}: rc {record.get('rc')}, {record.get('iterations')} iterations -> {LOGS / (case + '.log')}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--commit", type=Path, metavar="BUNDLE", help="write data/megatron_lm_logs/ from a bundle (CPU)")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--budget-s", type=float, default=520)
    ap.add_argument("--bundle", type=Path)
    ap.add_argument("--cases", default=",".join(CASES), type=lambda v: v.split(","),
                    help=f"comma-separated, of {', '.join(CASES)} (default: all)")
    a = ap.parse_args(argv)
    if a.commit:
        commit(a.commit)
        return
    if a.out is None:
        ap.error("--out DIR is required (or --commit BUNDLE)")
    a.resume_iters = a.iters // 2
    driver = Gallery(a)
    try:
        driver.run()
    finally:
        if a.bundle:
            a.bundle.mkdir(parents=True, exist_ok=True)
            for p in sorted(driver.out.glob("*/std*.txt")) + sorted(driver.out.glob("*/hog.txt")):
                if p.parent.name in CASES:
                    (a.bundle / p.parent.name).mkdir(exist_ok=True)
                    shutil.copy(p, a.bundle / p.parent.name / p.name)
            if (driver.out / "gallery.json").exists():
                shutil.copy(driver.out / "gallery.json", a.bundle / "gallery.json")


if __name__ == "__main__":
    main()
