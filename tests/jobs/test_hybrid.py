"""A Mamba2/attention/MoE hybrid (Nemotron-H) imported through Megatron-Bridge and trained on the
kit's local backend (helpers/runtime/layers/mamba/: the pure-torch mixer in Megatron's HybridModel), on
CPU in fp32, with the kit's tiny random Nemotron-H (helpers/launch/tiny_hf.py, pattern "ME*-"), saved
by transformers' own save_pretrained: its embedding is `backbone.embedding.weight`, which Bridge
0.6.2 calls `backbone.embeddings.weight` (the published spelling; both import: helpers/job/hf_names.py).

* logits equal transformers' at TP=1, TP=2+SP (MoE with TP needs SP), PP=2, EP=2 and CP=2, and
  import -> export without training is bit-identical, in the folder's own spelling (one torchrun
  job for all layouts, and for the same model saved with the published spelling, at TP=1);
* 5 iterations at PP=2, TP=2+SP, EP=2 (distributed optimizer) and CP=2 give the losses of one
  process, and every rank holds the memory planner's static bytes exactly;
* the PP=2 job's checkpoint reloads at TP=2+SP and at TP=1, and transformers, loading the PP=2
  job's export, gives the logits of that checkpoint (one job).
The mixer alone: tests/unit/test_mamba_mixer.py."""
import math

import pytest

from helpers import launch
from helpers.launch import hf_check, tiny_hf
from helpers.memory.vs_measured import static_mismatches

RTOL = 1e-5  # fp32 on CPU: the measured differences are 2e-7 .. 4e-7
TRAIN = dict(iters=5, seq_len=32, micro_batch=2, global_batch=4, device="cpu", progress=False)  # EP=2 runs DP=2
LAYOUTS = {"tp1": dict(), "tp2-sp": dict(tp=2, sp=True), "pp2": dict(pp=2), "ep2": dict(ep=2), "cp2": dict(cp=2)}
PUBLISHED = "tp1-published-names"


@pytest.fixture(scope="module")
def nemotron(tmp_path_factory):
    return str(tiny_hf.make("nemotronh", tmp_path_factory.mktemp("hf") / "nemotronh"))


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return str(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def parity(nemotron, out, tmp_path_factory):
    published = str(tiny_hf.make("nemotronh", tmp_path_factory.mktemp("hf") / "published", published_names=True))
    cases = [*LAYOUTS.values(), dict(hf_model=published)]
    return dict(zip([*LAYOUTS, PUBLISHED], hf_check.parity(nemotron, cases, nproc=2, out=out)))


@pytest.mark.parametrize("layout", [*LAYOUTS, PUBLISHED])
def test_logits_equal_transformers_and_export_is_bit_identical(parity, layout):
    record = parity[layout]
    assert record["max_rel_diff"] <= RTOL, record
    assert record["argmax_disagreement"] == 0.0, record
    assert record["export_identical"] is True, record


@pytest.fixture(scope="module")
def one_process(nemotron, out):
    return launch.run(hf_model=nemotron, out=out, **TRAIN)


@pytest.fixture(scope="module")
def pp2(nemotron, out, tmp_path_factory):
    """PP=2 cuts "ME*-" into "ME" | "*-"; it saves at the end and exports to HF."""
    export = tmp_path_factory.mktemp("export") / "nemotronh-trained"
    run = launch.run(hf_model=nemotron, out=out, pp=2, nproc=2, save_interval=TRAIN["iters"],
                     export_hf=str(export), **TRAIN)
    return run, export


def _same_losses(run, ref):
    assert len(run.losses) == TRAIN["iters"] and all(math.isfinite(x) for x in run.losses)
    assert max(abs(a - b) / b for a, b in zip(run.losses, ref.losses)) <= RTOL, (run.losses, ref.losses)
    a, b = run.metrics[0]["grad_norm"], ref.metrics[0]["grad_norm"]
    assert abs(a - b) / b <= RTOL, (a, b)


def test_pp2_trains_like_one_process(pp2, one_process):
    run, _ = pp2
    _same_losses(run, one_process)
    assert static_mismatches(run.spec, run.ranks) == []  # the stages "ME" and "*-", as planned
    checks = {c["name"]: c for c in run.report["checks"]}
    assert checks["checkpoint"]["status"] == "pass", checks["checkpoint"]  # zeroed, reloaded, same checksums


@pytest.mark.parametrize("sizes", [dict(tp=2, sp=True), dict(ep=2, dist_opt=True), dict(cp=2)],
                         ids=["tp2-sp", "ep2-distopt", "cp2"])
def test_layout_trains_like_one_process_and_holds_the_planned_static_bytes(nemotron, one_process, out, sizes):
    """Also the memory planner's static terms (helpers/memory/static.py: Mamba, attention, MLP and
    MoE layers of the pattern) against every rank's ranks.json, byte for byte; with the
    distributed optimizer the shards depend on every parameter's place in module order."""
    run = launch.run(hf_model=nemotron, out=out, nproc=2, **sizes, **TRAIN)
    _same_losses(run, one_process)
    assert static_mismatches(run.spec, run.ranks) == []


def test_checkpoint_reloads_at_other_layouts_and_the_export_has_its_logits(pp2, out):
    """The PP=2 checkpoint, resharded into TP=2+SP and into one rank's TP=1, against transformers
    loading the folder the same job exported."""
    run, export = pp2
    assert (export / "config.json").is_file()
    records = hf_check.parity(str(export), [dict(tp=2, sp=True), dict()], nproc=2,
                              load_dir=str(run.path / "checkpoints"), out=out)
    for r in records:
        assert r["max_rel_diff"] <= RTOL and r["argmax_disagreement"] == 0.0, r
