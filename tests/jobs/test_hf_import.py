"""Hugging Face import through Megatron-Bridge, on CPU in fp32, with the kit's tiny
random HF models (helpers/launch/tiny_hf.py: every family, norms randomised).

Which layouts each tiny model is checked at, and why those: its family's entry in
tests/hf_families.py (`Checked.parity`, `Checked.trained`).
* every family's logits equal transformers' in every layout of its entry (one torchrun job for all:
  helpers/launch/hf_check.py), and import -> export without training is bit-identical;
* in the same job, every parameter's gradient after one backward equals transformers' in each of
  those layouts (and at TP=1 for a family whose layouts are checked elsewhere: Nemotron-H);
* every config variant of every family (tests/jobs/hf_variants.py: one config choice changed) is
  refused before start by a named rule or, in one single-process job, gives transformers' logits;
  none fails inside the worker;
* GLM-4.7-Flash without q-LoRA, as a new user would save it, trains with transformers' loss;
* each family whose record names a training layout (where training does more than the parity
  job's one backward: tests/hf_families.py says which and why) trains 5 iterations there with the
  losses of one process; Gemma 3 also at CP=2;
* MLA (DeepSeek-V2 with q-LoRA, all layers dense) trains 5 iterations at TP=2 without SP and at
  CP=2 with the losses of one process; the K-RoPE gradient fix (helpers/runtime/layers/mla.py) is what
  makes TP=2 agree;
* an HF checkpoint missing a tensor is refused before start with one error naming the parameter.
Notebook 15_hf_import asserts the rest of the flow, each against one process or transformers: dense
TP=2 x PP=2 training, reload at another layout (eval loss), the trained export's logits, and
DeepSeek-V2 with MoE at TP=2+SP x EP=2 (the fix's SP branch).
Errors before launch: tests/unit/test_hf_model.py."""
import math

import pytest
from safetensors.torch import load_file, save_file

from helpers import launch
from helpers.errors import InvalidJob
from helpers.job import families, paths
from helpers.job.spec import JobSpec
from helpers.launch import hf_check, runner, tiny_hf
from helpers.memory.vs_measured import static_mismatches
from tests import hf_families
from tests.jobs import hf_variants

RTOL = 1e-5  # fp32 on CPU: the measured differences are 1e-7 .. 1.3e-6 (logits), 5e-7 .. 4e-6 (gradients)
TRAIN = dict(iters=5, seq_len=32, micro_batch=2, device="cpu", progress=False)


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {family: str(tiny_hf.make(family, root / family)) for family in tiny_hf.FAMILIES}


CASES = [dict(family=name, **layout) for name in families.TINY for layout in hf_families.PARITY.get(name, ())]
# Gradients at every layout of CASES, and at TP=1 for a tiny model whose layouts another test checks
GRADIENT_ONLY = [dict(family=name) for name in families.TINY if not hf_families.PARITY.get(name)]
# Every supported family's config variants, from its first tiny model
VARIANTS = [v for f in families.FAMILIES if f.supported for v in hf_variants.of(f.tiny[0].name)]


def _case_id(case: dict) -> str:
    return f"{case['family']}-" + ("-".join(f"{k}{v}" for k, v in case.items() if k != "family") or "tp1")


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    """Per variant id: its folder and None, or (outcome, why) when there is no job to run it in: a config
    transformers' own model cannot be built from (no checkpoint can have it), or the named rules that
    refuse it before start (runner.checked: every check a job meets)."""
    root = tmp_path_factory.mktemp("variants")
    found = {}
    for v in VARIANTS:
        try:
            folder = str(tiny_hf.make(v.family, root / f"v{len(found)}", **v.changes))
        except Exception as e:  # noqa: BLE001  (transformers' own refusal of the config)
            found[v.id] = (None, ("not a checkpoint", f"transformers cannot build it: {type(e).__name__}: {e}"))
            continue
        try:
            runner.checked(JobSpec(hf_model=folder, nproc=2, device="cpu", seq_len=32, iters=0))
            found[v.id] = (folder, None)
        except launch.InvalidJob as e:
            found[v.id] = (folder, ("refused", e.names))
    return found


@pytest.fixture(scope="module")
def parity(hf, tmp_path_factory):
    """One torchrun job: every family's layouts (logits, export, gradients) and the gradient-only cases."""
    cases = [{k: v for k, v in c.items() if k != "family"} | {"hf_model": hf[c["family"]], "check_grads": True}
             for c in CASES]
    cases += [{"hf_model": hf[c["family"]], "check_export": False, "check_grads": True} for c in GRADIENT_ONLY]
    records = hf_check.parity(hf["llama"], cases, nproc=2, out=str(tmp_path_factory.mktemp("parity")),
                              timeout_s=1200)
    return {"layouts": records[:len(CASES)], "gradient_only": records[len(CASES):]}


@pytest.fixture(scope="module")
def variant_parity(hf, variants, tmp_path_factory):
    """One single-process job: the logits of every variant that passed the checks. A variant changes one
    config choice of a family whose gradients the parity job checks; what it can break is the builder
    and the weight mapping, which its logits show."""
    built = [v for v, (folder, outcome) in variants.items() if outcome is None]  # ids
    cases = [{"hf_model": variants[v][0], "check_export": False} for v in built]
    records = hf_check.parity(hf["llama"], cases, nproc=1, out=str(tmp_path_factory.mktemp("variants")),
                              timeout_s=1200)
    return dict(zip(built, records, strict=True))


@pytest.mark.parametrize("index", range(len(CASES)), ids=[_case_id(c) for c in CASES])
def test_logits_equal_transformers_and_export_is_bit_identical(parity, hf, index):
    record = parity["layouts"][index]
    assert "error" not in record, record.get("traceback")
    assert record["hf_model"] == hf[CASES[index]["family"]]
    assert record["max_rel_diff"] <= RTOL, record
    assert record["argmax_disagreement"] == 0.0, record
    assert record["export_identical"] is True, record


@pytest.mark.parametrize("index", range(len(CASES) + len(GRADIENT_ONLY)),
                         ids=[_case_id(c) for c in CASES + GRADIENT_ONLY])
def test_gradients_equal_transformers(parity, index):
    """Every parameter's gradient after one backward of the next-token loss on the same batch, fp32,
    through Megatron's DDP and schedule, against transformers' by HF tensor name (Bridge's names and
    conversions): the largest relative error of any tensor within RTOL, and no tensor on one side only."""
    record = (parity["layouts"] + parity["gradient_only"])[index]
    assert "error" not in record, record.get("traceback")
    assert record["grad_missing"] == [] and record["grad_extra"] == [], record
    assert record["grad_tensors"] > 0 and record["grad_max_rel_diff"] <= RTOL, record["grad_worst"]


@pytest.mark.parametrize("family", sorted({v.family for v in VARIANTS}))
def test_config_variants_are_refused_by_name_or_equal_transformers(variant_parity, variants, family):
    """Each config variant of the family (tests/jobs/hf_variants.py) is refused before start by a
    named rule (hf_missing_<piece>), or builds and gives transformers' logits; a worker
    failure is neither. The outcomes, one line per variant, are this test's output."""
    outcomes, wrong = {}, []
    for v in (v for v in VARIANTS if v.family == family):
        folder, outcome = variants[v.id]
        if outcome is None:
            r = variant_parity[v.id]
            good = "error" not in r and r["max_rel_diff"] <= RTOL and r["argmax_disagreement"] == 0.0
            outcome = ("built", f"logits {r['max_rel_diff']:.1e}" if good else
                       r.get("error") or {k: r[k] for k in ("max_rel_diff", "argmax_disagreement")})
        elif outcome[0] == "refused":
            good = bool(outcome[1]) and all(n.startswith("hf_missing_") for n in outcome[1])
        else:
            good = True  # transformers itself builds no model from it
        outcomes[v.name] = outcome
        if not good:
            wrong.append(v.name)
    print("\n".join(f"{family} {name}: {outcome[0]}: {outcome[1]}" for name, outcome in outcomes.items()))
    assert not wrong, {name: outcomes[name] for name in wrong}
    assert any(o[0] == "built" for o in outcomes.values()), outcomes  # the family's other choices build


# The GLM-4.7-Flash config a new user saves: no q-LoRA, first_k_dense_replace given, transformers'
# defaults elsewhere (rms_norm_eps 1e-5 while its q_a/kv_a norms use 1e-6, one shared expert)
GLM_FLASH_NO_Q_LORA = dict(q_lora_rank=None, first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2,
                           n_group=1, topk_group=1, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                           v_head_dim=16, num_hidden_layers=3, num_key_value_heads=4, intermediate_size=128,
                           moe_intermediate_size=32)


def test_glm_4_7_flash_without_q_lora_trains_with_transformers_loss(tmp_path):
    """Trained at one process on WikiText-2: the validation loss before the first step equals
    transformers' on the same samples, and every step's loss is finite."""
    if paths.data_dir() is None:
        pytest.skip("KIT_DATA_DIR with WikiText-2 is not set (CI sets it)")
    import torch
    import transformers

    config = transformers.Glm4MoeLiteConfig(**{**families.TINY_COMMON, **GLM_FLASH_NO_Q_LORA})
    torch.manual_seed(0)
    folder = tmp_path / "glm-flash"
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tiny_hf.byte_tokenizer().save_pretrained(folder)
    run = launch.run(hf_model=str(folder), out=str(tmp_path / "runs"), data="wikitext", eval_iters=1,
                     **{**TRAIN, "global_batch": 2})
    assert len(run.losses) == TRAIN["iters"] and all(math.isfinite(x) for x in run.losses)
    kit, reference = run.evaluations[0]["loss"], hf_check.transformers_loss(run)
    assert abs(kit - reference) / reference <= RTOL, (kit, reference)


# family -> the layout that exercises what it adds (a global batch of 4: EP=2 on 2 ranks is DP=2)
TRAINED = {name: hf_families.TRAINED[name] for name in families.TINY if name in hf_families.TRAINED}


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
    # refused before start (the pre-start check runs Bridge's own mapping over the header's names and shapes)
    with pytest.raises(InvalidJob, match=r"hf_weights_missing.*decoder\.layers\.1\.pre_mlp_layernorm\.weight, "
                                         r"which Bridge reads from model\.layers\.1\.post_attention_layernorm"):
        launch.run(hf_model=str(broken), out=str(tmp_path / "runs"), **{**TRAIN, "iters": 1})
    assert not (tmp_path / "runs").exists()  # no run directory: nothing started
