"""Precision on one GPU: the kit's FP8 training (precision='fp8', helpers/runtime/layers/fp8_linear.py)
against bf16 on the ~1.4B dense GPT of the GPU-speed benchmark, in one invocation.

  1. the FP8 GEMMs themselves: `torch._scaled_mm` (tensorwise, rowwise) against the same code with
     _scaled_mm replaced by its definition, on one FC1-shaped GEMM (forward, dgrad, wgrad), and
     their time next to bf16's;
  2. training: bf16, fp8 tensorwise, fp8 delayed and fp8 rowwise jobs (helpers.launch.run) from the same
     initial weights on WikiText-2 (GPT-2 tokenizer): tokens/s, MFU over the dense bf16 peak,
     peak memory, loss curves and the relative gap of the final loss (mean of the last 10
     iterations), the held-out losses (validation every 25 iterations, test after the last: the
     comparison that memorising the small training text does not distort); the planner's peak next
     to the measured one;
  3. recipes on real tensors: layer 0's GEMM operands captured from the bf16 run
     (capture_tensors_at), quantised by every recipe of helpers/precision/recipes.py (MXFP8 emulated).

    KIT_DATA_DIR=<folder with wikitext-2-raw-v1/ and tokenizers/gpt2/> \\
    python -m benchmarks.speed.precision --out DIR [--iters 200] [--global-batch 32] [--micro-batch 4]
        [--rowwise-iters 30] [--skip gemm,bf16,tensorwise,delayed,rowwise,recipes] [--merge EARLIER/results.json]
        [--repeat bf16|fp8_delayed] [--other-seed bf16|fp8_delayed] [--seed N]
        [--profile [full|device]] [--data-dir CORPUS] [--job-timeout-s 420] [--lr-warmup-iters N --lr-decay cosine]

Global batch 32 (8 microbatches) is the GPU-speed benchmark's (benchmarks/speed/throughput.py); 200 of
its iterations take ~4.5 minutes per precision on an H200, so one 10-minute device call holds one
200-iteration run (plus the short ones): `--skip tensorwise,delayed,rowwise` (gemm, bf16, recipes),
then `--skip gemm,bf16,delayed,rowwise,recipes --merge <that call's results.json>` (tensorwise), then
`--skip gemm,bf16,tensorwise,recipes --merge ...` (delayed, rowwise); --merge keeps the earlier
entries and compares against them: losses across calls, speed only between entries of the same
machine (each device call may get another GPU; add a short bf16 run to a call for its speed-up).
Each training row also has the host/device split of its steps (metrics.jsonl's fwd_bwd_issue_s and
fwd_bwd_drain_s, medians): a drain near 0 means the host, not the GPU, sets the pace. --profile
writes torch.profiler tables of each training run's last two iterations (DIR/profile_<run>.txt,
torch_profile; those two iterations are left out of the step time). --data-dir trains on another
corpus in WikiText's layout (benchmarks/common/text_corpus.py: WikiText-2's ~0.22M training tokens are
memorised in 200 iterations at global batch 32 or 64); --lr-warmup-iters/--lr-decay/--min-lr give
the jobs a learning-rate schedule (default: a constant 3e-4); losses are compared only between
entries of the same data and schedule. --repeat trains an entry again unchanged (on one GPU bf16 repeats
bit for bit for tens of iterations, so that spread is small); --other-seed trains it again with another
JobSpec.seed (OTHER_SEED: other initial weights, sample order and held-out samples): how far the seed
alone moves the loss, which on a corpus of uneven documents is mostly which batches came last, so it is
not the spread of a bf16/FP8 pair (that one holds the batches fixed). --seed trains every entry of the
call with that seed: a bf16/FP8 pair repeated from other initial weights and batches; losses are
compared only between entries of one seed.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from benchmarks.common.gpu_samples import GpuSamples
from helpers import launch
from helpers.job.flops import mfu
from helpers.job.spec import JobSpec
from helpers.memory.vs_measured import peak_rows

MODEL = dict(num_layers=24, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=8192,
             vocab_size=50304, max_seq_len=2048)
SEQ = 2048
EVAL_EVERY = 25  # held-out (validation) loss every 25 iterations; test loss after the last
LR = 3e-4  # peak learning rate (constant unless --lr-warmup-iters/--lr-decay)
PEAK_BF16 = 989e12  # H100/H200 dense bf16, datasheet
WARMUP = 3
OTHER_SEED = 4321  # --other-seed: JobSpec.seed's default is 1234
# FP8 entries (fp8_<variant>): recipe, and whether the output layer's GEMMs are FP8 too (JobSpec.fp8_output_layer)
VARIANTS = {"tensorwise": ("tensorwise", False), "delayed": ("delayed", False), "rowwise": ("rowwise", False),
            "delayed_out": ("delayed", True)}


def gemm_check(m=8192, k=2048, n=8192) -> dict:
    import torch

    from helpers.precision import fp8_matmul

    def emulated(a, b, scale_a, scale_b, out_dtype):
        return ((a.float() * scale_a) @ (b.float() * scale_b)).to(out_dtype)

    def run(fn, x, w, dy):
        x = x.detach().requires_grad_()
        w = w.detach().requires_grad_()
        y = fn(x, w)
        y.backward(dy)
        return y, x.grad, w.grad

    def timed(fn, x, w, dy, reps=20):
        for _ in range(3):
            run(fn, x, w, dy)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            run(fn, x, w, dy)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / reps / 1e3

    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16) * 1e-3
    flops = 3 * 2 * m * n * k
    out = {"shape": [m, k, n], "quantiser": quantiser_check(x), "bf16_s": timed(lambda a, b: a @ b.t(), x, w, dy)}
    out["bf16_tflops"] = flops / out["bf16_s"] / 1e12
    for recipe in ("tensorwise", "rowwise"):
        real = run(lambda a, b: fp8_matmul.fp8_matmul(a, b, recipe), x, w, dy)
        saved, fp8_matmul.scaled_mm = fp8_matmul.scaled_mm, emulated
        try:
            ref = run(lambda a, b: fp8_matmul.fp8_matmul(a, b, recipe), x, w, dy)
        finally:
            fp8_matmul.scaled_mm = saved
        exact = run(lambda a, b: a @ b.t(), x, w, dy)
        diff = {name: float((r.float() - e.float()).abs().max() / e.float().abs().max())
                for name, r, e in zip(("forward", "dgrad", "wgrad"), real, ref)}
        vs_bf16 = {name: float((r.float() - e.float()).norm() / e.float().norm())
                   for name, r, e in zip(("forward", "dgrad", "wgrad"), real, exact)}
        t = timed(lambda a, b: fp8_matmul.fp8_matmul(a, b, recipe), x, w, dy)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            run(lambda a, b: fp8_matmul.fp8_matmul(a, b, recipe), x, w, dy)
            torch.cuda.synchronize()
        print(f"{recipe}: GPU kernels of one forward+backward\n" +
              prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=70), flush=True)
        out[recipe] = {"max_rel_diff_vs_emulation": diff, "rel_error_vs_bf16": vs_bf16, "s": t,
                       "tflops_incl_quantisation": flops / t / 1e12, "speedup_vs_bf16": out["bf16_s"] / t}
    return out


def quantiser_check(x) -> dict:
    """The Triton quantiser (helpers/precision/fp8_cast_gpu.py) against the torch one it replaces
    (recipes.scale_and_cast_to) on a spread-out bf16 matrix: differing FP8 bytes and dequantisation
    multipliers for every format and scale granularity (0 expected), and its time for both layouts
    next to the time its memory traffic needs at the H200's ~4.8 TB/s."""
    import torch

    from helpers.precision import formats, fp8_cast_gpu, recipes
    x = (x * torch.logspace(-3, 2, x.shape[1], device=x.device)).to(torch.bfloat16)
    x[0] = 0  # an all-zero row: scale 1
    out = {}
    for fmt in ("e4m3", "e5m2"):
        f = formats.get(fmt)
        for name, dim in (("tensor", None), ("row", -1), ("column", 0)):
            want, want_inverse = recipes.scale_and_cast_to(x, f.max, f.dtype, dim)
            q, qt, inverse = fp8_cast_gpu.scale_cast(x, f.max, f.dtype, dim, plain=True, transposed=True)
            out[f"{fmt}_{name}"] = {
                "differing_bytes": int((q.view(torch.uint8) != want.view(torch.uint8)).sum()),
                "differing_bytes_transposed":
                    int((qt.view(torch.uint8) != want.t().contiguous().view(torch.uint8)).sum()),
                "differing_multipliers": int((inverse != want_inverse).sum())}
    f = formats.get("e4m3")
    bad = x[:64, :128].clone()
    bad[1, 1], bad[2, 2] = float("nan"), float("inf")  # NaN must stay NaN (torch's clamp), not become -max
    want, _ = recipes.scale_and_cast_to(bad, f.max, f.dtype, None)
    q, _, _ = fp8_cast_gpu.scale_cast(bad, f.max, f.dtype, None)
    out["nan_positions_equal"] = bool(torch.equal(q.float().isnan(), want.float().isnan()))
    for _ in range(3):
        fp8_cast_gpu.scale_cast(x, f.max, f.dtype, None, True, True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        fp8_cast_gpu.scale_cast(x, f.max, f.dtype, None, True, True)
    end.record()
    torch.cuda.synchronize()
    out["both_layouts_us"] = start.elapsed_time(end) / 20 * 1e3
    out["traffic_bound_us"] = x.numel() * (2 + 2 + 1 + 1) / 4.8e12 * 1e6  # amax read, read, two FP8 writes
    out["exact"] = out["nan_positions_equal"] and all(v == 0 for r in out.values() if isinstance(r, dict)
                                                      for v in r.values())
    return out


def train(precision: str, recipe: str, iters: int, gbs: int, micro: int, out: Path, data_dir: str | None,
          timeout_s: int, schedule: dict, capture: int | None = None, profile: Path | None = None,
          output_layer: bool = False, profile_mode: str = "full", seed: int | None = None) -> dict:
    t0 = time.time()
    with GpuSamples() as gpu:
        run = launch.run(model="tiny-gpt", model_overrides=MODEL, seq_len=SEQ, micro_batch=micro, global_batch=gbs,
                         iters=iters, lr=LR, **schedule, device="cuda", precision=precision, fp8_recipe=recipe,
                         fp8_output_layer=output_layer,
                         data="wikitext", data_dir=data_dir, tokenizer="gpt2", seed_checkpoint=False,
                         out=str(out / "runs"), eval_interval=EVAL_EVERY, progress=False, timeout_s=timeout_s,
                         capture_tensors_at=capture or None, torch_profile=str(profile) if profile else None,
                         torch_profile_mode=profile_mode,
                         env={"NCCL_NVLS_ENABLE": "0"}, **({"seed": seed} if seed is not None else {}))
    timed = run.metrics[WARMUP:len(run.metrics) - (2 if profile else 0)]  # (the profiled two: slower)
    if not timed:
        raise ValueError(f"{iters} iterations leave no timed step after {WARMUP} warm-up ones"
                         f"{' and 2 profiled ones' if profile else ''}: ask for more")
    step = statistics.median(m["step_time_s"] for m in timed)
    split = {k: statistics.median(m[k] for m in timed) for k in ("fwd_bwd_issue_s", "fwd_bwd_drain_s")}
    peaks = json.loads((run.path / "device_memory.json").read_text())
    data = next(c["evidence"] for c in run.report["checks"] if c["name"] == "data")
    plan = peak_rows(run.spec, peaks)[0]
    model = run.spec.model_preset()
    return {"precision": precision, "recipe": recipe if precision == "fp8" else None, "iters": iters,
            "fp8_output_layer": output_layer, "seed": run.spec.seed,
            "global_batch": gbs, "micro_batch": micro, "machine": machine(), "step_time_s": step,
            "tokens_per_s": gbs * SEQ / step, **split,
            "mfu_vs_bf16_peak": mfu(gbs * SEQ / step, model, SEQ, PEAK_BF16), "losses": run.losses,
            "step_times_s": [m["step_time_s"] for m in run.metrics],  # steps slow down as the GPU warms
            "final_loss_mean10": statistics.mean(run.losses[-10:]), **held_out(run.evaluations),
            "max_allocated_bytes": peaks["0"]["mem_max_allocated_bytes"],
            "planned_bytes": plan["planned"], "plan_error": plan["error"],
            "fp8_linears": next(c["evidence"].get("fp8_linears") for c in run.report["checks"] if c["name"] == "model"),
            "data": {k: data[k] for k in ("splits", "tokens")}, "lr_schedule": schedule or None,
            "gpu_samples": gpu.summary(), "wall_s": time.time() - t0, "run_dir": str(run.path)}


def schedule(args) -> dict:
    """The learning-rate schedule fields that differ from a constant lr (empty: constant)."""
    fields = {"lr_warmup_iters": args.lr_warmup_iters, "lr_decay": args.lr_decay, "min_lr": args.min_lr}
    return {} if fields == {"lr_warmup_iters": 0, "lr_decay": "constant", "min_lr": 0.0} else fields


def machine() -> str:
    """Which GPU ran an entry: speed-ups compare runs on one machine only (bf16 alone varies ~2.5%
    between machines of the same kind; --merge joins entries of different device calls)."""
    import socket

    import torch
    return f"{socket.gethostname()}/{torch.cuda.get_device_properties(0).uuid}"


def comparable(a: dict, b: dict, *keys: str) -> bool:
    """Entries of equal settings (entries made before micro_batch was recorded ran with 4); an
    unrecorded machine matches none."""
    old = {"micro_batch": 4}
    return all(a.get(k, old.get(k)) == b.get(k, old.get(k)) is not None for k in keys)


def loss_gaps(base: dict, other: dict, across_seeds: bool = False) -> dict | None:
    """other's final (mean of the last 10) and test loss relative to base's, or None unless both trained
    on the same tokens with the same lr: iterations, global batch, data and schedule (micro batch does
    not matter), and from the same seed unless across_seeds (the run-to-run spread)."""
    default_seed = JobSpec.__dataclass_fields__["seed"].default  # entries made before the seed was recorded
    same_run = all(base.get(k) == other.get(k) for k in ("data", "lr_schedule")) and (
        across_seeds or base.get("seed", default_seed) == other.get("seed", default_seed))
    if "final_loss_mean10" not in base or "final_loss_mean10" not in other or not same_run or not comparable(
            base, other, "iters", "global_batch"):
        return None
    return {"final_loss": other["final_loss_mean10"] / base["final_loss_mean10"] - 1,
            "test_loss": other["test_loss"] / base["test_loss"] - 1
            if base.get("test_loss") and other.get("test_loss") else None}


def held_out(evaluations: list[dict]) -> dict:
    """The run's held-out losses (validation.jsonl): the validation curve [[iteration, loss], ...] and
    the test loss after the last iteration. Unlike the training loss, they do not fall by
    memorising the training text, which 200 iterations of global batch 32 pass over ~60 times."""
    return {"validation": [[e["iteration"], e["loss"]] for e in evaluations if e["split"] == "valid"],
            "test_loss": next((e["loss"] for e in evaluations if e["split"] == "test"), None)}


def reached(error: Exception) -> dict:
    """What a failed job wrote before it stopped (a job killed by its time limit after its last
    iteration still has every loss), so that a failed device call does not lose its curve."""
    run = getattr(error, "run", None)  # helpers.errors.JobFailed carries its run directory
    if run is None or not run.metrics:
        return {}
    return {"reached_iterations": len(run.metrics), "losses": run.losses,
            "step_times_s": [m["step_time_s"] for m in run.metrics], **held_out(run.evaluations)}


def recipes_on(path: Path) -> dict:
    import torch

    from helpers.precision import recipes
    tensors = torch.load(path)
    out = {}
    for name, rec in tensors.items():
        for kind in ("input", "grad_output", "weight"):
            if kind not in rec:
                continue
            t = rec[kind].cuda().float()
            fmt = "e5m2" if kind == "grad_output" else "e4m3"
            out[f"{name.split('.')[-1]}.{kind}"] = {
                r: recipes.errors(t, recipes.quantize(t, r, fmt)) for r in recipes.RECIPES}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--global-batch", type=int, default=32)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--rowwise-iters", type=int, default=30)
    ap.add_argument("--data-dir", help="text in WikiText's layout instead of KIT_DATA_DIR's WikiText-2 "
                                       "(benchmarks/common/text_corpus.py); the tokenizer still comes from "
                                       "KIT_DATA_DIR")
    ap.add_argument("--job-timeout-s", type=int, default=420, help="each training job's time limit")
    ap.add_argument("--lr-warmup-iters", type=int, default=0, help="JobSpec.lr_warmup_iters")
    ap.add_argument("--lr-decay", default="constant", help="JobSpec.lr_decay")
    ap.add_argument("--min-lr", type=float, default=0.0, help="JobSpec.min_lr")
    ap.add_argument("--profile", nargs="?", const="full", choices=("full", "device"),
                    help="torch.profiler tables of each run's last two iterations (JobSpec.torch_profile); "
                         "--profile device: device kernels and launches only (torch_profile_mode)")
    ap.add_argument("--skip", default="", help="comma list of gemm,bf16,tensorwise,delayed,rowwise,delayed_out,"
                    "recipes (delayed_out: delayed with the output layer in FP8 too, JobSpec.fp8_output_layer)")
    ap.add_argument("--merge", type=Path, help="an earlier call's results.json: its entries are kept")
    ap.add_argument("--repeat", choices=("bf16", "fp8_delayed"), help="train this entry again, as <entry>_repeat: "
                    "how far one precision lands from itself (bit for bit equal for tens of iterations on one GPU, "
                    "then apart)")
    ap.add_argument("--other-seed", choices=("bf16", "fp8_delayed"), help="train this entry again with another "
                    f"seed ({OTHER_SEED}: other initial weights, sample order and held-out samples), as "
                    "<entry>_other_seed: how far the seed alone moves the loss")
    ap.add_argument("--seed", type=int, help="JobSpec.seed of every entry of this call (default: JobSpec's): "
                    "a bf16/FP8 pair from other initial weights, sample order and held-out samples")
    args = ap.parse_args()
    import torch

    from helpers.precision import hardware
    args.out = args.out.resolve()  # the jobs run in the repository root: profile paths must not be relative
    args.out.mkdir(parents=True, exist_ok=True)
    skip = set(args.skip.split(","))
    res = json.loads(args.merge.read_text()) if args.merge else {}
    res.update({"gpu": torch.cuda.get_device_name(0), "support": hardware.this_device().message(),
                "commands": res.get("commands", []) + [" ".join(sys.argv)], "torch": torch.__version__})

    def save():
        (args.out / "results.json").write_text(json.dumps(res, indent=1))

    def attempt(key, fn, *a, **kw):
        t0 = time.time()
        try:
            res[key] = fn(*a, **kw)
            r = res[key]
            brief = {k: r[k] for k in ("tokens_per_s", "mfu_vs_bf16_peak", "final_loss_mean10", "max_allocated_bytes",
                                       "planned_bytes", "fp8_linears", "fwd_bwd_issue_s", "fwd_bwd_drain_s")
                     if isinstance(r, dict) and k in r}
            shown = json.dumps(brief) if brief else json.dumps(r)[:3000]
            print(f"{key} ({time.time() - t0:.0f} s): {shown}", flush=True)
        except Exception as e:  # keep going: one failure should not hide the other measurements
            res[key] = {"error": str(e)[-3000:], **reached(e)}
            print(f"{key}: FAILED {str(e)[-2000:]}", flush=True)
        save()

    print(res["gpu"], "|", res["support"], flush=True)
    if "gemm" not in skip:
        attempt("gemm", gemm_check)
    batches = (args.global_batch, args.micro_batch, args.out, args.data_dir and str(Path(args.data_dir).resolve()),
               args.job_timeout_s, schedule(args))
    profile = (lambda key: args.out / f"profile_{key}.txt") if args.profile else (lambda key: None)
    if "bf16" not in skip:
        attempt("bf16", train, "bf16", "tensorwise", args.iters, *batches,
                capture=args.iters // 2 if "recipes" not in skip else None, profile=profile("bf16"),
                profile_mode=args.profile or "full", seed=args.seed)
    for variant, (recipe, output_layer) in VARIANTS.items():
        iters = args.rowwise_iters if recipe == "rowwise" else args.iters
        if variant not in skip and iters:
            attempt(f"fp8_{variant}", train, "fp8", recipe, iters, *batches, profile=profile(f"fp8_{variant}"),
                    output_layer=output_layer, profile_mode=args.profile or "full", seed=args.seed)
    for entry, suffix, seed in ((args.repeat, "repeat", None), (args.other_seed, "other_seed", OTHER_SEED)):
        if not entry:
            continue
        precision, recipe = ("bf16", "tensorwise") if entry == "bf16" else ("fp8", "delayed")
        attempt(f"{entry}_{suffix}", train, precision, recipe, args.iters, *batches, seed=seed or args.seed)
        spread_key = f"spread_{entry}" if suffix == "repeat" else f"spread_{entry}_{suffix}"
        res.pop(spread_key, None)
        spread = loss_gaps(res.get(entry, {}), res.get(f"{entry}_{suffix}", {}), across_seeds=suffix == "other_seed")
        if spread:
            res[spread_key] = spread
            print(f"{entry} against its {suffix.replace('_', ' ')}: {json.dumps(spread)}", flush=True)
    b = res.get("bf16", {})
    for variant in VARIANTS:  # (rowwise: a shorter run, so its loss gap only at equal iterations)
        f = res.get(f"fp8_{variant}", {})
        res.pop(f"speedup_{variant}", None)  # a merged file's figures must not outlive a failed re-run
        res.pop(f"final_loss_gap_{variant}", None)
        res.pop(f"test_loss_gap_{variant}", None)
        if "tokens_per_s" not in b or "tokens_per_s" not in f:
            continue
        if comparable(b, f, "micro_batch", "global_batch", "machine"):  # speed: same layout, same GPU
            res[f"speedup_{variant}"] = f["tokens_per_s"] / b["tokens_per_s"]
            print(f"fp8 {variant} / bf16: {res[f'speedup_{variant}']:.3f}x tokens/s", flush=True)
        gaps = loss_gaps(b, f)
        if gaps:
            res[f"final_loss_gap_{variant}"] = gaps["final_loss"]
            print(f"fp8 {variant}: final loss gap {gaps['final_loss']:+.4%}", flush=True)
            if gaps["test_loss"] is not None:
                res[f"test_loss_gap_{variant}"] = gaps["test_loss"]
                print(f"fp8 {variant}: test loss gap {gaps['test_loss']:+.4%}", flush=True)
    captured = Path(b.get("run_dir", "")) / "linear_tensors.pt"
    if "recipes" not in skip and captured.exists():
        attempt("recipes_on_layer0", recipes_on, captured)
    save()


if __name__ == "__main__":
    main()
