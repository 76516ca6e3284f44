"""Checkpoints that survive: bit-exact resume after `kill -9`, a crash in the middle of
a save, one clear error for bad checkpoints, and a reshard matrix (save at 4 layouts, load each
into 4 others, same evaluation loss). Jobs are tiny (2 + 2 iterations, seq 32) and the
checkpoints the crash runs leave behind are reused as the matrix's sources."""
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import launch
from helpers.job import checkpoint_dir

N = 2  # iterations before the crash; the straight run does 2N
# Every job here also follows a learning-rate schedule (warm-up, then cosine decay), which a resumed
# job must continue where the crashed one stopped (the scheduler counts samples, as Megatron-LM's does).
SCHEDULE = dict(lr=3e-3, lr_warmup_iters=1, lr_decay="cosine", min_lr=1e-4)
BATCH = dict(micro_batch=2, global_batch=4, seq_len=32, device="cpu", progress=False, **SCHEDULE)
RTOL = 1e-5  # fp32 CPU: other layouts reduce in another order (observed <= 2e-7); see test_launch.py

CRASHES = {
    # kill -9 of the whole job (torchrun and every rank) at the start of iteration N+1
    "tp2-pp2": dict(tp=2, pp=2, save_interval=N, fault=f"killjob@{N + 1}"),
    # kill -9 of the job while rank 1 is writing the checkpoint of iteration N+1
    "dp2-distopt": dict(nproc=2, dist_opt=True, save_interval=1, fault=f"killjob_during_save@{N + 1}:rank1"),
    "moe-ep2": dict(model="tiny-moe", ep=2, nproc=2, save_interval=N, fault=f"killjob@{N + 1}"),
}


def _layout(case: dict) -> dict:
    return {k: v for k, v in case.items() if k not in ("save_interval", "fault")}


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return str(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def trios(out):
    """{case: (straight run, crashed run, resumed run)}, built once for the module."""
    cache = {}

    def get(name):
        if name not in cache:
            case = CRASHES[name]
            layout = _layout(case)
            straight = launch.run(**BATCH, **layout, out=out, iters=2 * N)
            with pytest.raises(launch.JobFailed) as err:
                launch.run(**BATCH, **layout, out=out, iters=2 * N, save_interval=case["save_interval"],
                           faults=[case["fault"]])
            crashed = err.value.run
            assert "torchrun exit code -9" in str(err.value), str(err.value)  # SIGKILL, not an error
            resumed = launch.run(**BATCH, **layout, out=out, iters=2 * N, save_interval=case["save_interval"],
                                 load_dir=str(crashed.path / "checkpoints"))
            cache[name] = straight, crashed, resumed
        return cache[name]
    return get


def scheduled_lr(iteration: int, iters: int) -> float:
    """SCHEDULE's learning rate at a 1-based iteration, written out: Megatron's scheduler sits at
    step iteration - 1 (so the warm-up's first iteration trains at lr 0), warms up linearly, then
    follows a half cosine from lr to min_lr over the steps left until `iters`."""
    step, warm, peak, low = iteration - 1, SCHEDULE["lr_warmup_iters"], SCHEDULE["lr"], SCHEDULE["min_lr"]
    if step <= warm:
        return peak * step / warm
    return low + (peak - low) * 0.5 * (1 + math.cos(math.pi * (step - warm) / (iters - warm)))


@pytest.mark.parametrize("name", CRASHES)
def test_resume_after_kill_is_bit_exact(name, trios):
    straight, crashed, resumed = trios(name)
    # (the kill during a save comes after iteration N+1 was logged, the kill at a start before)
    assert len(crashed.losses) in (N, N + 1)
    assert crashed.losses == straight.losses[:len(crashed.losses)]
    info = json.loads((resumed.path / "resumed.json").read_text())
    assert info["iteration"] == N and info["rng_restored"] and info["optimizer_loaded"]
    assert [m["iteration"] for m in resumed.metrics] == list(range(N + 1, 2 * N + 1))
    assert resumed.losses == straight.losses[N:]  # exact equality, not a tolerance
    assert [m["lr"] for m in resumed.metrics] == [m["lr"] for m in straight.metrics][N:]
    assert [m["lr"] for m in straight.metrics] == pytest.approx([scheduled_lr(k, 2 * N) for k in range(1, 2 * N + 1)],
                                                                 rel=1e-12, abs=0)
    assert checkpoint_dir.latest(resumed.path / "checkpoints").name == checkpoint_dir.iter_name(2 * N)


def test_crash_during_save_leaves_latest_on_the_previous_checkpoint(trios, out):
    _, crashed, resumed = trios("dp2-distopt")
    root = crashed.path / "checkpoints"
    states = {c["iteration"]: c for c in checkpoint_dir.list_checkpoints(root)}
    assert states[N]["state"] == "complete" and states[N]["latest"]
    assert states[N + 1]["state"] == "partial" and not states[N + 1]["latest"]
    assert checkpoint_dir.latest(root).name == checkpoint_dir.iter_name(N)
    with pytest.raises(checkpoint_dir.CheckpointError, match="partial"):
        checkpoint_dir.verify(root / checkpoint_dir.iter_name(N + 1))
    # Asking for the partial one by name is refused before any process starts.
    with pytest.raises(launch.InvalidJob, match=r"iter_0000003 is partial.*Fix"):
        launch.run(**BATCH, nproc=2, dist_opt=True, out=out, iters=2 * N,
                   load_dir=str(root / checkpoint_dir.iter_name(N + 1)))


def test_bad_checkpoints_get_one_clear_error_before_start(trios, tmp_path):
    _, crashed, _ = trios("tp2-pp2")
    good = crashed.path / "checkpoints"
    out = tmp_path / "runs"
    kw = dict(**BATCH, tp=2, pp=2, out=str(out), iters=2 * N)

    def refused(load_dir, pattern, **extra):
        with pytest.raises(launch.InvalidJob, match=pattern):
            launch.run(**{**kw, **extra}, load_dir=str(load_dir))
        assert not out.exists() or not any(out.iterdir()), "nothing may start for a refused job"

    refused(tmp_path / "nowhere", r"nowhere does not exist.*Fix")
    bad = tmp_path / "ckpts"
    shutil.copytree(good, bad)
    it = bad / checkpoint_dir.iter_name(N)
    refused(bad, r"holds a different model.*num_experts.*Fix", model="tiny-moe", ep=2, tp=1, pp=1, nproc=2)
    shard = next(it.glob("__1_0.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    refused(bad, r"iter_0000002 is corrupt: __1_0.distcp changed.*Fix")
    shard.unlink()
    refused(bad, r"iter_0000002 is partial: 1 of \d+ files are missing \(__1_0.distcp\).*Fix")
    (it / "metadata.json").write_text("{not json")
    refused(bad, r"is corrupt: a metadata file does not parse")
    shutil.rmtree(it)
    refused(bad, r"iter_0000002 is missing.*Fix")


# ---- reshard matrix --------------------------------------------------------------------------
# Sources: the three crash runs' iteration-N checkpoints plus a PP=2 x VPP=2 run.
# Targets: each loads every source of its model in one eval-only job (forward only, fixed batch).
GPT_TARGETS = {"single": {}, "tp2": dict(tp=2), "pp2": dict(pp=2), "pp2-vpp2": dict(pp=2, vpp=2),
               "dp2-distopt": dict(nproc=2, dist_opt=True)}
MOE_TARGETS = {"moe-single": {}, "moe-pp2": dict(pp=2), "moe-tp2-sp": dict(tp=2, sp=True),
               "moe-pp2-vpp2": dict(pp=2, vpp=2)}


@pytest.fixture(scope="module")
def sources(trios, out):
    vpp = launch.run(**BATCH, pp=2, vpp=2, out=out, iters=N, save_interval=N)
    gpt = {"pp2-vpp2": vpp.path / "checkpoints"}
    for name in ["tp2-pp2", "dp2-distopt"]:
        gpt[name] = trios(name)[1].path / "checkpoints"
    return {"tiny-gpt": gpt, "tiny-moe": {"moe-ep2": trios("moe-ep2")[1].path / "checkpoints"}}


@pytest.fixture(scope="module")
def reshard(sources, tmp_path_factory, two_at_a_time):
    """{target: its eval-only run, or the exception it raised}: the 9 targets' jobs (1-2 ranks, mostly
    process start) two at a time, so both cores work; each target's test checks its own run."""
    targets = {**GPT_TARGETS, **MOE_TARGETS}
    outs = {t: str(tmp_path_factory.mktemp(t)) for t in targets}

    def one(target):
        model = "tiny-moe" if target in MOE_TARGETS else "tiny-gpt"
        return launch.run(**BATCH, out=outs[target], **targets[target], model=model, iters=0,
                          eval_only=True, load_dir=[str(p) for p in sources[model].values()])

    return two_at_a_time(one, targets)


@pytest.mark.parametrize("target", [*GPT_TARGETS, *MOE_TARGETS])
def test_reshard_matrix_keeps_the_eval_loss(target, sources, reshard):
    model = "tiny-moe" if target in MOE_TARGETS else "tiny-gpt"
    srcs = sources[model]
    run = reshard[target]
    if isinstance(run, Exception):
        raise run
    results = json.loads((run.path / "eval.json").read_text())
    assert len(results) == len(srcs)
    for name, r in zip(srcs, results):
        assert r["iteration"] == N
        assert r["saved_layout"]["world_size"] >= 2  # every source is a multi-rank layout
        rel = abs(r["eval_loss"] - r["saved_eval_loss"]) / r["saved_eval_loss"]
        assert rel <= RTOL, (name, target, r)


def test_resume_into_another_layout_continues_training(trios, runs):
    """Optimizer state reshards too: a DP=2 distributed-optimizer checkpoint resumed with DP=1
    (distributed optimizer, fully reshardable format) and a TP=2 x PP=2 one resumed on one
    process continue with the losses the original layout produced (fp32 tolerance)."""
    for name, layout in [("dp2-distopt", dict(pp=2, dist_opt=True)), ("tp2-pp2", {})]:
        straight, crashed, _ = trios(name)
        run = launch.run(**{**BATCH, **runs}, **layout, iters=2 * N,
                         load_dir=str(crashed.path / "checkpoints"))
        info = json.loads((run.path / "resumed.json").read_text())
        assert info["optimizer_loaded"] and not info["rng_restored"]
        assert len(run.losses) == N
        assert max(abs(a - b) / b for a, b in zip(run.losses, straight.losses[N:])) <= RTOL, name


def test_optimizer_kind_change_needs_load_optimizer_false(trios, runs):
    _, crashed, _ = trios("dp2-distopt")
    with pytest.raises(launch.InvalidJob, match="distributed-optimizer state.*load_optimizer=False"):
        launch.run(**{**BATCH, **runs}, nproc=2, iters=2 * N, load_dir=str(crashed.path / "checkpoints"))


# ---- Megatron-LM's own resume reads on the same checkpoints -------------------------------------
def test_megatron_lm_resumes_the_kit_checkpoint_of_every_layout(sources, out):
    """Each source run's own megatron-lm.sh plus `--load` through Megatron-LM's parse_args +
    validate_args, _load_base_checkpoint, check_checkpoint_args and its scheduler's load_state_dict
    (tests/jobs/megatron_lm_resume.py): TP x PP, DP + distributed optimizer, EP, PP x VPP and CP."""
    cp = launch.run(**BATCH, cp=2, nproc=2, out=out, iters=N, save_interval=N)
    runs = {name: Path(root).parent for name, root in {**sources["tiny-gpt"], **sources["tiny-moe"]}.items()}
    runs["cp2"] = cp.path
    argv = [str(a) for path in runs.values() for a in (path, launch.RunDir(path).spec.world_size)]
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("megatron_lm_resume.py")), *argv],
                          capture_output=True, text=True, timeout=600, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    for name, path in runs.items():
        answer = answers[str(path)]
        assert "ok" in answer, f"{name}: {answer}"
        read, spec = answer["ok"], launch.RunDir(path).spec
        assert read["checkpoint"] == checkpoint_dir.iter_name(N) and read["iteration"] == N, name
        assert read["consumed_train_samples"] == N * spec.global_batch_size, name
        assert read["scheduler_num_steps"] == N * spec.global_batch_size, name
        assert read["lr"] == pytest.approx(scheduled_lr(N + 1, spec.iters), rel=1e-12), name  # the next iteration's
        assert (read["tensor_model_parallel_size"], read["pipeline_model_parallel_size"],
                read["data_parallel_size"]) == (spec.tp, spec.pp, spec.dp), name
        assert read["no_save_rng"], name  # CPU generators: Megatron-LM skips them (megatron_args.py)


@pytest.mark.parametrize("name", ["tp2-pp2", "dp2-distopt"])
def test_the_kit_resumes_what_megatron_lm_saved(name, trios, tmp_path):
    """The crashed run's iteration-N state written again by Megatron-LM's own save_checkpoint
    (tests/jobs/megatron_lm_save.py: Megatron-LM's format, the distributed optimizer's state in its
    default dp_reshardable layout, Megatron-LM's scheduler), then resumed by the kit: the losses of
    the uninterrupted run, exactly."""
    straight, crashed, _ = trios(name)
    theirs = tmp_path / "megatron-lm" / "checkpoints"
    saved = subprocess.run([str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc-per-node",
                            str(crashed.spec.world_size), "--log-dir", str(tmp_path / "torchelastic"),  # not in /tmp
                            str(Path(__file__).with_name("megatron_lm_save.py")),
                            str(crashed.path), str(crashed.path / "checkpoints" / checkpoint_dir.iter_name(N)),
                            str(theirs)], capture_output=True, text=True, timeout=600, cwd=Path(__file__).parents[2])
    assert saved.returncode == 0, saved.stderr[-3000:]
    assert not (theirs / checkpoint_dir.iter_name(N) / checkpoint_dir.KIT_FILE).exists()  # Megatron-LM's alone
    resumed = launch.run(**BATCH, **_layout(CRASHES[name]), out=str(tmp_path / "runs"), iters=2 * N,
                         load_dir=str(theirs))
    info = json.loads((resumed.path / "resumed.json").read_text())
    assert info["written_by"] == "Megatron-LM" and info["iteration"] == N and info["optimizer_loaded"]
    assert info["opt_param_scheduler"]["num_steps"] == N * resumed.spec.global_batch_size
    assert resumed.losses == straight.losses[N:]  # exact equality, not a tolerance
