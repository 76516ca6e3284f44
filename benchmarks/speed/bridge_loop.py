"""The kit's job against Megatron-Bridge's own training loop on the recipe the kit wrote, on one GPU.

(a) The kit trains the 1.4B GPT of benchmarks/speed/throughput.py (helpers.launch.run, NCCL, bf16,
Megatron's local layer spec) and writes `bridge_recipe.py` into its run directory
(helpers/rundir/bridge_recipe.py: `def config() -> ConfigContainer` from Bridge 0.6.2's classes).
(b) Bridge trains that very file: `pretrain(config(), forward_step)` under torchrun, with Bridge's
own GPT `forward_step`, setup, optimizer, schedule and data loader; Bridge imported through the
kit's import stand-ins where Transformer Engine or megatron-energon is absent
(helpers/runtime/hf/te_standin.py: TE's names are never called on the local layer spec).

Bridge runs the recipe twice:
  - "kit tokens": config() with its dataset swapped for a Bridge DatasetProvider serving the kit's
    synthetic samples (helpers/runtime/data/synthetic.py) in the order Megatron's pretraining
    sampler asks for them, which is the kit's order: same seed, same tokens in the same order, so
    the losses compare iteration by iteration;
  - "recipe data": config()'s own dataset (MockGPTDataset: documents of random length counting up
    from 1, Megatron's MockGPTLowLevelDataset), other tokens than the kit's; tokens/s only.
Both set MACHINE_FIELDS on the provider first (the fused softmax needs apex's kernels; see there).

    python -m benchmarks.speed.bridge_loop --out DIR [--size gpt-1.4b] [--iters 20] [--attention megatron_local]
        [--bridge-data kit,recipe]

Writes DIR/results.json (per-iteration losses and step times of every run, tokens/s as the median of
the steps after the first WARMUP, the recipe's text) and prints the losses side by side. Step times
of Bridge's loop: wall time between the ends of consecutive steps, after a device synchronize, taken
by a Bridge callback (on_train_step_end).

    python -m benchmarks.speed.bridge_loop --bridge RECIPE --bridge-data kit --result FILE
        (under torchrun: the Bridge side alone, what the driver starts)
"""
import argparse
import dataclasses
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.speed.throughput import SIZES, VOCAB, WARMUP
from helpers.job.paths import REPO_ROOT

BF16_BOUND = 1e-2  # relative loss difference two bf16 runs of one job may show (README: GPU)
# Set on the recipe's provider before Bridge trains it. The recipe leaves the fused kernels to
# Bridge's GPTModelProvider defaults (helpers.rundir.megatron_flags.MACHINE), which assume apex or
# Transformer Engine: masked_softmax_fusion=True reaches for apex's scaled_masked_softmax_cuda in
# FusedScaleMaskSoftmax.is_kernel_available at the first forward (sequence 2048, bf16), a module this
# machine lacks; the kit runs Megatron's torch softmax. attention_softmax_in_fp32: the kit's
# TransformerConfig keeps Megatron's default (True); Bridge's provider default (False) takes the
# softmax in bf16.
MACHINE_FIELDS = {"masked_softmax_fusion": False, "attention_softmax_in_fp32": True}


def run_kit(size: str, attention: str, iters: int, out: Path) -> dict:
    from helpers import launch
    from helpers.rundir import names

    name, fields, seq, mb, gbs = SIZES[size]
    t0 = time.time()
    run = launch.run(model=name, model_overrides=dict(fields, vocab_size=VOCAB, max_seq_len=seq), seq_len=seq,
                     micro_batch=mb, global_batch=gbs, iters=iters, lr=3e-4, device="cuda", attention=attention,
                     seed_checkpoint=False, out=str(out / "runs"), progress=False, timeout_s=500,
                     env={"NCCL_NVLS_ENABLE": "0"})
    steps = [m["step_time_s"] for m in run.metrics]
    step = statistics.median(steps[WARMUP:] or steps)
    return {"attention": attention, "losses": run.losses, "step_times_s": steps, "step_time_s": step,
            "tokens_per_s": gbs * seq / step, "wall_s": time.time() - t0, "run_dir": str(run.path),
            "recipe": str(run.path / names.BRIDGE_RECIPE), "params": run.ranks[0].get("params")}


def run_bridge(size: str, recipe: Path, data: str, out: Path) -> dict:
    """Bridge's pretrain on the recipe under torchrun (one process); its rank 0's result file."""
    result = out / f"bridge_{data}.json"
    log = out / f"bridge_{data}.log"
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
    t0 = time.time()
    with log.open("w") as f:
        p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
                            "-m", "benchmarks.speed.bridge_loop", "--bridge", str(recipe), "--bridge-data", data,
                            "--result", str(result)], stdout=f, stderr=subprocess.STDOUT, env=env, timeout=560,
                           cwd=REPO_ROOT)
    if p.returncode != 0 or not result.exists():
        raise RuntimeError(f"Bridge's pretrain failed (rc {p.returncode}):\n{log.read_text()[-6000:]}")
    _, _, seq, _, gbs = SIZES[size]
    r = json.loads(result.read_text())
    step = statistics.median(r["step_times_s"][WARMUP:] or r["step_times_s"])
    return dict(r, data=data, step_time_s=step, tokens_per_s=gbs * seq / step, wall_s=time.time() - t0)


# ---- the Bridge side, in the torchrun process ---------------------------------------------------------
def import_bridge(recipe_path: str):
    """Bridge's pretrain, forward_step, Callback, DatasetProvider and the recipe module, imported with
    the kit's stand-ins for the packages this machine lacks."""
    import megatron.core  # noqa: F401  (before Bridge: the TE stand-in relies on it)

    from helpers.runtime.hf import te_standin

    with te_standin.training_config_imports():
        from megatron.bridge.data.base import DatasetProvider
        from megatron.bridge.training.callbacks import Callback
        from megatron.bridge.training.gpt_step import forward_step
        from megatron.bridge.training.pretrain import pretrain

        module_spec = importlib.util.spec_from_file_location("bridge_recipe", recipe_path)
        recipe = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(recipe)
    return pretrain, forward_step, Callback, DatasetProvider, recipe


def skip_built_helpers() -> None:
    """Bridge's initialize_megatron runs Megatron-Core's compile_helpers(), which runs `make` in
    megatron/core/datasets; the megatron-core wheel ships that module compiled (helpers_cpp) and no
    Makefile, so make fails and Bridge exits. Where the compiled module imports there is nothing to
    build, and Bridge's call is skipped; elsewhere it runs as written."""
    import megatron.core.datasets as datasets
    import megatron.bridge.training.initialize as initialize

    if (Path(datasets.__file__).parent / "Makefile").exists():
        return
    from megatron.core.datasets import helpers_cpp  # noqa: F401  (raises where it is not built)
    initialize.compile_helpers = lambda: None


def kit_tokens_provider(DatasetProvider, dataset_config, seed: int, vocab: int):
    """A Bridge DatasetProvider serving sample i of the kit's synthetic source at index i; the
    dataloader settings are the recipe's."""
    import torch

    from helpers.runtime.data import synthetic

    class KitSamples(torch.utils.data.Dataset):
        def __init__(self, n: int, seq: int):
            self.n, self.seq = n, seq

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            s = synthetic.sample(seed, int(i), self.seq, vocab)
            return {"tokens": s[:-1], "labels": s[1:], "loss_mask": torch.ones(self.seq),
                    "position_ids": torch.arange(self.seq)}

    @dataclasses.dataclass(kw_only=True)
    class KitTokens(DatasetProvider):
        seq_length: int

        def build_datasets(self, context):
            return KitSamples(context.train_samples, self.seq_length), None, None

    loader = {f.name: getattr(dataset_config, f.name) for f in dataclasses.fields(DatasetProvider)
              if hasattr(dataset_config, f.name)}
    return KitTokens(seq_length=dataset_config.seq_length, **loader)


def bridge_main(recipe_path: str, data: str, result: str) -> None:
    import torch

    pretrain, forward_step, Callback, DatasetProvider, recipe = import_bridge(recipe_path)
    skip_built_helpers()

    class Record(Callback):
        """Each step's loss, gradient norm and wall time (after a device synchronize)."""

        def __init__(self):
            self.losses, self.grad_norms, self.step_times_s, self.t = [], [], [], None

        def on_train_start(self, context):
            torch.cuda.synchronize()
            self.t = time.perf_counter()

        def on_train_step_end(self, context):
            torch.cuda.synchronize()
            now = time.perf_counter()
            self.step_times_s.append(now - self.t)
            self.t = now
            self.losses.append(float(context.loss_dict["lm loss"]))
            self.grad_norms.append(None if context.grad_norm is None else float(context.grad_norm))

    cfg = recipe.config()
    for name, value in MACHINE_FIELDS.items():
        setattr(cfg.model, name, value)
    if data == "kit":
        cfg.dataset = kit_tokens_provider(DatasetProvider, cfg.dataset, cfg.rng.seed, cfg.model.vocab_size)
    record = Record()
    t0 = time.time()
    pretrain(cfg, forward_step, callbacks=[record])
    if int(os.environ.get("RANK", "0")) == 0:
        Path(result).write_text(json.dumps({
            "losses": record.losses, "grad_norms": record.grad_norms, "step_times_s": record.step_times_s,
            "pretrain_wall_s": time.time() - t0, "dataset": type(cfg.dataset).__name__,
            "layer_spec": getattr(cfg.model.transformer_layer_spec, "__name__", None),
            "gradient_accumulation_fusion": cfg.model.gradient_accumulation_fusion,
            "masked_softmax_fusion": cfg.model.masked_softmax_fusion,
            "bias_dropout_fusion": cfg.model.bias_dropout_fusion,
            "cross_entropy_loss_fusion": cfg.model.cross_entropy_loss_fusion,
            "apply_rope_fusion": cfg.model.apply_rope_fusion, "set_on_provider": MACHINE_FIELDS,
            "max_allocated_bytes": torch.cuda.max_memory_allocated()}))


# ---- the driver -----------------------------------------------------------------------------------------
def relative(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def table(results: dict) -> str:
    kit, bridge = results.get("kit", {}), results.get("bridge/kit tokens", {})
    lines = []
    if "losses" in kit and "losses" in bridge:
        lines += ["| iteration | kit loss | Bridge loss | relative difference |", "|---|---|---|---|"]
        for i, (a, b) in enumerate(zip(kit["losses"], bridge["losses"]), 1):
            lines.append(f"| {i} | {a:.5f} | {b:.5f} | {relative(b, a):.1e} |")
        lines.append("")
    lines += ["| run | tokens/s | step s (median) | first step s |", "|---|---|---|---|"]
    for key, r in results.items():
        if isinstance(r, dict) and "tokens_per_s" in r:
            lines.append(f"| {key} | {r['tokens_per_s']:,.0f} | {r['step_time_s']:.3f} | {r['step_times_s'][0]:.2f} |")
        elif isinstance(r, dict) and "error" in r:
            lines.append(f"| {key} | failed | | |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--size", default="gpt-1.4b", choices=[k for k in SIZES if k != "moe"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--attention", default="megatron_local",
                    help="the kit's attention for (a); megatron_local is the module Bridge's local_layer_spec holds")
    ap.add_argument("--bridge-data", default="kit,recipe",
                    help="Bridge's runs: kit (the kit's synthetic tokens), recipe (the recipe's own MockGPTDataset)")
    ap.add_argument("--bridge", help="(torchrun process) the recipe file Bridge trains")
    ap.add_argument("--result", help="(torchrun process) where rank 0 writes its result")
    args = ap.parse_args()
    if args.bridge:
        bridge_main(args.bridge, args.bridge_data, args.result)
        return
    if args.out is None:
        ap.error("--out DIR is required")
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    results, recipe_text = {}, None

    # the command as a reader repeats it: the module, its arguments, the output folder as OUT
    command = " ".join(["python -m benchmarks.speed.bridge_loop"] +
                       ["OUT" if a == str(args.out) else a for a in sys.argv[1:]])

    def save():
        text = json.dumps(
            {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "command": command,
             "size": args.size, "model": SIZES[args.size][1], "seq_len": SIZES[args.size][2],
             "micro_batch": SIZES[args.size][3], "global_batch": SIZES[args.size][4], "iters": args.iters, "warmup_steps_left_out": WARMUP,
             "bf16_bound": BF16_BOUND, "recipe": recipe_text, "results": results}, indent=1)
        (args.out / "results.json").write_text(text.replace(str(args.out), "OUT"))  # run folders, logs too

    try:
        results["kit"] = run_kit(args.size, args.attention, args.iters, args.out)
    except Exception as e:
        results["kit"] = {"error": str(e)[-3000:]}
        save()
        raise
    recipe = Path(results["kit"]["recipe"])
    shutil.copy(recipe, args.out / "bridge_recipe.py")
    recipe_text = recipe.read_text()
    save()
    print(f"kit: {results['kit']['tokens_per_s']:,.0f} tokens/s", flush=True)
    for data in args.bridge_data.split(","):
        key = "bridge/kit tokens" if data == "kit" else "bridge/recipe data"
        try:
            results[key] = run_bridge(args.size, recipe, data, args.out)
            print(f"{key}: {results[key]['tokens_per_s']:,.0f} tokens/s", flush=True)
        except Exception as e:  # keep going: the other run still answers
            results[key] = {"error": str(e)[-6000:]}
            print(f"{key}: FAILED {str(e)[-3000:]}", flush=True)
        save()
    kit, bridge = results["kit"], results.get("bridge/kit tokens", {})
    if "losses" in bridge:
        worst = max(relative(b, a) for a, b in zip(kit["losses"], bridge["losses"]))
        results["max_relative_loss_difference"] = worst
        results["within_bf16_bound"] = worst <= BF16_BOUND
        save()
        print(f"largest relative loss difference over {len(kit['losses'])} iterations: {worst:.1e} "
              f"(bf16 bound {BF16_BOUND:.0e})")
    print(table(results))


if __name__ == "__main__":
    main()
