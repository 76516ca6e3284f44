"""The job runner: success, equivalence with one process (SDPA vs local attention; the layouts are
notebooks 03, 04 and 06), named failures, timeouts that leave no
process behind, and requests rejected before anything starts. A rank that raises, one that dies
without a traceback, NaN, a hang inside a collective (collective_timeout_s) and one in a checkpoint
save (stall_timeout_s) are asserted in notebooks/13_failure_modes.ipynb, which runs each of them."""
import math
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers import launch
from helpers.launch.torchrun import leftover_processes

# fp32 on CPU: layouts differ from one process only in the order of floating-point reductions
# (split matmuls, all-reduce sums). Measured differences are <= 2e-7 relative over 5 iterations
# at lr 3e-3; 1e-5 is the bound and leaves room for Adam amplifying rounding noise.
RTOL = 1e-5
BATCH = dict(iters=5, micro_batch=2, global_batch=8)


def _rel(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def timed_out(tmp_path_factory):
    """The job of test_timeout_kills_every_process_and_names_the_stalled_rank, started in a thread
    with the module's first job (`reference` asks for it): most of its 40 s is waiting (rank 1
    sleeps, rank 0 waits in a collective, both idle), and the module's other jobs run in that time
    instead of after it. Yields a future of (seconds from start to the exception, the exception or
    None)."""
    out = str(tmp_path_factory.mktemp("timeout"))

    def hang():
        t0 = time.monotonic()
        try:
            launch.run(out=out, device="cpu", progress=False, iters=3, tp=2, timeout_s=40,
                       faults=["hang@2:rank1"])
        except Exception as e:
            return time.monotonic() - t0, e
        return time.monotonic() - t0, None

    with ThreadPoolExecutor(max_workers=1) as pool:
        yield pool.submit(hang)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, timed_out):  # timed_out: started first, it waits while this module runs
    out = str(tmp_path_factory.mktemp("ref"))
    return launch.run(out=out, device="cpu", progress=False, **BATCH)


def test_single_process_run_writes_the_run_directory(reference):
    run = reference
    for name in ["spec.json", "manifest.json", "metrics.jsonl", "groups.json", "ranks.json", "logs/rank0.log"]:
        assert (run.path / name).is_file(), name
    assert [m["iteration"] for m in run.metrics] == [1, 2, 3, 4, 5]
    assert all(math.isfinite(l) for l in run.losses)
    assert run.losses[-1] < run.losses[0]
    manifest = run.manifest
    assert manifest["versions"]["megatron-core"] == "0.19.2"
    assert manifest["layout"]["dp"] == 1
    for key in ["grad_norm", "step_time_s", "tokens_per_s", "skipped"]:
        assert key in run.metrics[0]
    for m in run.metrics:  # the host/device split of the forward/backward passes lies inside the step
        assert 0 < m["fwd_bwd_issue_s"] and 0 <= m["fwd_bwd_drain_s"]
        assert m["fwd_bwd_issue_s"] + m["fwd_bwd_drain_s"] < m["step_time_s"]
    assert run.ranks[0]["param_bytes"] == run.ranks[0]["params"] * 4  # fp32


# TP=2/4, PP=2/4 (+VPP) and DP=2/4 against one process (rtol 1e-5): notebooks 03, 04 and 06 assert it
# under papermill (tests/notebooks), so no separate jobs here.


def test_megatron_local_attention_matches_the_kit_sdpa_attention(reference, runs):
    """attention='megatron_local' builds Megatron's own DotProductAttention (materialised scores);
    the default is the kit's SDPA module. Same weights, same maths: same losses to fp32 rounding."""
    run = launch.run(**runs, **BATCH, attention="megatron_local")
    built = [next(c for c in r.report["checks"] if c["name"] == "model")["evidence"] for r in (reference, run)]
    assert [b["core_attention"] for b in built] == ["SDPACoreAttention", "DotProductAttention"]
    assert [b["backend"] for b in built] == ["local", "local"]  # auto on CPU (helpers/job/rules/resolve.py)
    assert _rel(run.losses, reference.losses) <= RTOL, (run.losses, reference.losses)


def test_without_seed_checkpoint_pp_starts_elsewhere(reference, runs):
    """The seed checkpoint is what makes layouts comparable: without it each pipeline stage draws
    its layers' initial weights from its own RNG stream and the first loss differs."""
    run = launch.run(**runs, **BATCH, pp=2, seed_checkpoint=False)
    assert abs(run.losses[0] - reference.losses[0]) > 1e-6


def test_timeout_kills_every_process_and_names_the_stalled_rank(timed_out):
    # 40 s: enough for both ranks to reach iteration 2 even on a busy 2-core machine (startup is
    # ~7 s when idle, more beside this module's other jobs); the kill itself must then take
    # seconds, not minutes.
    elapsed, err = timed_out.result()
    assert isinstance(err, launch.JobTimeout), repr(err)
    assert elapsed < 40 + 25
    assert err.ranks == [1], str(err)
    assert leftover_processes(err.run.path) == []


@pytest.mark.parametrize("request_, name", [
    (dict(tp=2, nproc=3), "world_divisible_dense"),
    (dict(tp=3), "heads_divisible_by_tp"),
    (dict(pp=3), "layers_divisible_by_pp"),
    (dict(sp=True), "sp_requires_tp"),
    (dict(model="tiny-moe", ep=3, nproc=3), "experts_divisible_by_ep"),
])
def test_invalid_request_rejected_before_spawning(request_, name, runs, tmp_path):
    with pytest.raises(launch.InvalidJob, match=name):
        launch.run(**runs, **request_)
    assert not (tmp_path / "runs").exists()  # no run directory: nothing was started


def test_cuda_request_without_gpu_is_rejected(runs):
    if launch.cuda_device_count() > 0:
        pytest.skip("this machine has a GPU")
    with pytest.raises(launch.InvalidJob, match="no CUDA device"):
        launch.run(**{**runs, "device": "cuda"})


def test_unknown_model_is_rejected(runs):
    with pytest.raises(launch.InvalidJob, match="unknown model preset 'nope'"):
        launch.run(**runs, model="nope")


def test_a_learners_script_that_fails_is_reported_with_its_last_lines(tmp_path, monkeypatch):
    """launch.run_script: a rank's exception reaches the caller as ScriptFailed with the script's
    own message, not a torchrun traceback to dig through; torchrun's agent leaves nothing in the
    temp folder (its attempt folders and the failed rank's error file go to a log folder removed after)."""
    import tempfile

    from helpers.errors import ScriptFailed
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv("TMPDIR", str(scratch))
    script = tmp_path / "broken.py"
    script.write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\n"
                      "raise ValueError('my model has 5 heads, TP=2 cannot split them')\n")
    with pytest.raises(ScriptFailed, match="5 heads, TP=2"):
        launch.run_script(script, nproc=1, timeout_s=120)
    assert not list(scratch.iterdir())
    with pytest.raises(FileNotFoundError):
        launch.run_script(tmp_path / "missing.py")
