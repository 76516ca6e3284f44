"""Hugging Face import through Megatron-Bridge, on CPU in fp32, with the kit's tiny
random HF models (helpers/launch/tiny_hf.py: every family, norms randomised).

Which layouts each tiny model is checked at, and why those: its family's record in
helpers/job/families.py (`Tiny.parity`, `Tiny.trained`).
* every family's logits equal transformers' in every layout of its record (one torchrun job for all:
  helpers/launch/hf_check.py), and import -> export without training is bit-identical;
* each family whose record names a training layout (the one that exercises what it adds to the
  kit's builder) trains 5 iterations there with the losses of one process; Gemma 3 also at CP=2;
* MLA (DeepSeek-V2 with q-LoRA, all layers dense) trains 5 iterations at TP=2 without SP and at
  CP=2 with the losses of one process; the K-RoPE gradient fix (helpers/runtime/layers/mla.py) is what
  makes TP=2 agree;
* an HF checkpoint missing a tensor fails with one error naming the parameter.
Notebook 14_hf_import asserts the rest of the flow, each against one process or transformers: dense
TP=2 x PP=2 training, reload at another layout (eval loss), the trained export's logits, and
DeepSeek-V2 with MoE at TP=2+SP x EP=2 (the fix's SP branch).
Errors before launch: tests/unit/test_hf_model.py."""
import math

import pytest
from safetensors.torch import load_file, save_file

from helpers import launch
from helpers.job import families
from helpers.launch import hf_check, tiny_hf
from helpers.memory.vs_measured import static_mismatches

RTOL = 1e-5  # fp32 on CPU: the measured differences are 1e-7 .. 5e-7
TRAIN = dict(iters=5, seq_len=32, micro_batch=2, device="cpu", progress=False)


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {family: str(tiny_hf.make(family, root / family)) for family in tiny_hf.FAMILIES}


CASES = [dict(family=name, **layout) for name, tiny in families.TINY.items() for layout in tiny.parity]


@pytest.fixture(scope="module")
def parity(hf, tmp_path_factory):
    cases = [{k: v for k, v in c.items() if k != "family"} | {"hf_model": hf[c["family"]]} for c in CASES]
    return hf_check.parity(hf["llama"], cases, nproc=2, out=str(tmp_path_factory.mktemp("parity")))


@pytest.mark.parametrize("index", range(len(CASES)),
                         ids=[f"{c['family']}-" + ("-".join(f"{k}{v}" for k, v in c.items() if k != "family")
                                                   or "tp1") for c in CASES])
def test_logits_equal_transformers_and_export_is_bit_identical(parity, hf, index):
    record = parity[index]
    assert record["hf_model"] == hf[CASES[index]["family"]]
    assert record["max_rel_diff"] <= RTOL, record
    assert record["argmax_disagreement"] == 0.0, record
    assert record["export_identical"] is True, record


# family -> the layout that exercises what it adds (a global batch of 4: EP=2 on 2 ranks is DP=2)
TRAINED = {name: tiny.trained for name, tiny in families.TINY.items() if tiny.trained}


@pytest.fixture(scope="module")
def trained(hf, two_at_a_time, tmp_path_factory):
    """Per family: one process and its layout, 5 iterations each (independent jobs, two at a time)."""
    out = str(tmp_path_factory.mktemp("trained"))

    def job(key):
        family, layout = key
        sizes = {**TRAINED[family], "nproc": 2} if layout else {}
        return launch.run(hf_model=hf[family], out=out, **TRAIN, global_batch=4, **sizes)
    return two_at_a_time(job, [(f, layout) for f in TRAINED for layout in (False, True)])


@pytest.mark.parametrize("family", TRAINED)
def test_family_trains_at_its_layout_like_one_process(trained, family):
    """Also: every rank of both holds the memory planner's static bytes exactly (the planner reads
    the family from config.json: tests/unit/test_hf_memory_plan.py)."""
    one, run = trained[(family, False)], trained[(family, True)]
    for r in (one, run):
        if isinstance(r, Exception):
            raise r
    _same_losses(run, one)
    assert static_mismatches(one.spec, one.ranks) == [] and static_mismatches(run.spec, run.ranks) == []


@pytest.fixture(scope="module")
def mla_dense(tmp_path_factory):
    """DeepSeek-V2 with every layer dense (first_k_dense_replace = 3 of 3): MLA alone, so TP=2 may
    run without SP (MoE with TP needs SP) and both branches of the K-RoPE fix get exercised."""
    return str(tiny_hf.make("dsv2", tmp_path_factory.mktemp("hf") / "mla-dense", first_k_dense_replace=3))


@pytest.fixture(scope="module")
def mla_one_process(mla_dense, tmp_path_factory):
    return launch.run(hf_model=mla_dense, out=str(tmp_path_factory.mktemp("one")), save_interval=TRAIN["iters"],
                      **TRAIN)


def test_gemma3_trains_at_cp2_like_one_process(trained, hf, runs):
    """Gemma 3's two rotary tables are both cut to each CP rank's load-balanced chunks, and its
    windows are taken on global positions (the PP=2 run above checks the layer numbering across stages)."""
    run = launch.run(hf_model=hf["gemma3"], **{**runs, **TRAIN}, global_batch=4, cp=2, nproc=2)
    _same_losses(run, trained[("gemma3", False)])


def _same_losses(run, ref):
    assert len(run.losses) == TRAIN["iters"] and all(math.isfinite(x) for x in run.losses)
    assert max(abs(a - b) / b for a, b in zip(run.losses, ref.losses)) <= RTOL, (run.losses, ref.losses)
    a, b = run.metrics[0]["grad_norm"], ref.metrics[0]["grad_norm"]
    assert abs(a - b) / b <= RTOL, (a, b)


def test_mla_trains_at_tp2_without_sp_like_one_process(mla_dense, mla_one_process, runs):
    """Without MLASelfAttentionTP's K-RoPE all-reduce, iteration 2 already differs by 4e-4."""
    run = launch.run(hf_model=mla_dense, **{**runs, **TRAIN}, tp=2, nproc=2)
    _same_losses(run, mla_one_process)
    assert run.manifest["hf_model"]["name"] == "mla-dense" and len(run.manifest["hf_model"]["config_sha256"]) == 64
    assert run.manifest["versions"]["megatron-bridge"] == "0.6.2"
    assert {c["name"]: c for c in run.report["checks"]}["model"]["evidence"]["model"] == "mla-dense"


def test_mla_trains_at_cp2_like_one_process(mla_dense, mla_one_process, runs):
    _same_losses(launch.run(hf_model=mla_dense, **{**runs, **TRAIN}, cp=2, nproc=2), mla_one_process)


def test_a_saved_checkpoint_exports_later_and_transformers_gives_its_logits(mla_dense, mla_one_process, runs,
                                                                           tmp_path):
    """A job trained without export_hf: eval_only + export_hf writes its checkpoint as an HF folder
    (here at TP=2: the export gathers the shards); transformers' logits on it = the checkpoint's."""
    checkpoint = str(mla_one_process.path / "checkpoints")
    exported = tmp_path / "exported"
    launch.run(hf_model=mla_dense, **{**runs, **TRAIN, "iters": 0}, tp=2, nproc=2, eval_only=True,
               load_dir=checkpoint, export_hf=str(exported))
    [record] = hf_check.parity(str(exported), [dict()], nproc=1, load_dir=checkpoint, out=runs["out"])
    assert record["max_rel_diff"] <= RTOL and record["argmax_disagreement"] == 0.0, record
    with pytest.raises(launch.InvalidJob, match="exactly one load_dir"):
        launch.run(hf_model=mla_dense, **{**runs, **TRAIN, "iters": 0}, eval_only=True,
                   load_dir=[checkpoint, checkpoint], export_hf=str(tmp_path / "two"))


def test_a_missing_hf_tensor_is_one_error_naming_the_parameter(hf, tmp_path):
    broken = tmp_path / "llama-missing-norm"
    tiny_hf.make("llama", broken)
    tensors = load_file(broken / "model.safetensors")
    del tensors["model.layers.1.post_attention_layernorm.weight"]  # Bridge 0.6.2 would only warn
    save_file(tensors, broken / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(launch.JobFailed, match=r"HFImportError: .*decoder\.layers\.1\.pre_mlp_layernorm\.weight"):
        launch.run(hf_model=str(broken), out=str(tmp_path / "runs"), **{**TRAIN, "iters": 1})
