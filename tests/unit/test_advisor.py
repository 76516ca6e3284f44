"""The layout advisor (helpers/advisor/): the enumerator refuses exactly what the kit's rules refuse,
the ranking puts fitting layouts first and fastest first, the command line answers for dense,
MoE, MLA and hybrid models (presets and a Hugging Face folder) with the JSON fields it promises,
the GPU profiles carry their sources, and bad input gets one clear error. The memory planner's
full-recompute term is checked here too. No processes."""
import json

import pytest

from helpers.advisor import advise, cli, gpus
from helpers.advisor.candidates import candidates
from helpers.job.layout import Layout
from helpers.job.models import preset
from helpers.launch import tiny_hf
from helpers.memory import plan_memory
from helpers.memory.activations import layer_activation
from helpers.memory.training import Training

FIELDS = {"tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "dist_opt", "recompute", "fits", "memory_gib",
          "step_s", "tokens_per_s_per_gpu", "refused"}


def test_the_enumerator_refuses_what_the_rules_refuse():
    model = preset("tiny-moe")  # 4 heads, 2 KV groups, 8 experts, 4 layers
    found = list(candidates(model, 16, 8, seq_len=256, global_batch=32, max_micro_batch=2))
    refused = [c for c in found if c.refused]
    accepted = [c for c in found if not c.refused]
    assert refused and accepted
    for c in refused:
        assert tuple(sorted({v.name for v in c.layout.validate(model)})) == c.refused
    assert all(not c.layout.validate(model) for c in accepted)
    names = {n for c in refused for n in c.refused}
    assert {"heads_divisible_by_tp", "moe_tp_requires_sp"} <= names
    # TP wider than a node is kept (ranked by the time model), not dropped
    assert any(c.layout.tp == 16 for c in found)
    # every training choice of an accepted layout
    assert {(c.training.dist_opt, c.training.recompute) for c in accepted} == {
        (d, r) for d in (False, True) for r in ("none", "selective", "full")}


def test_fitting_layouts_come_first_fastest_first():
    advice = advise(preset("llama3-8b"), gpus=8, gpu="h100-80gb", seq_len=4096, global_batch=16, max_micro_batch=2)
    fits = [r.fits for r in advice.rows]
    assert fits == sorted(fits, reverse=True) and True in fits and False in fits
    fitting = advice.fitting()
    assert [r.step.step_s for r in fitting] == sorted(r.step.step_s for r in fitting)
    assert advice.best() is fitting[0]
    plan = plan_memory(advice.model, advice.best().layout, advice.best().training)
    assert advice.best().memory_gib == pytest.approx(plan.reserved_bytes / 2**30)


def run_cli(capsys, *args) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("model, gpus", [("llama3-8b", 8),  # dense
                                         ("control-moe", 8),  # MoE: 128 experts
                                         ("deepseek-v2-lite", 4),  # MLA + MoE
                                         ("nemotron-3-nano-30b-a3b", 8)])  # Mamba hybrid
def test_the_command_line_answers_in_json_for_every_kind_of_model(capsys, model, gpus):
    rc, out, _ = run_cli(capsys, "--model", model, "--gpus", str(gpus), "--gpu", "h200", "--seq-len", "4096",
                         "--global-batch", "16", "--max-micro-batch", "1", "--json")
    assert rc == 0
    rows = json.loads(out)
    assert rows and all(FIELDS <= set(r) for r in rows)
    accepted = [r for r in rows if not r["refused"]]
    assert accepted and any(r["fits"] for r in accepted)
    assert all(r["step_s"] > 0 and r["tokens_per_s_per_gpu"] > 0 and r["memory_gib"] > 0 for r in accepted)
    assert all(r["step_s"] is None and not r["fits"] for r in rows if r["refused"])
    assert all(r["dp"] * r["tp"] * r["pp"] * r["cp"] == gpus for r in accepted)


def test_a_hugging_face_hybrid_folder(capsys, tmp_path):
    config = tiny_hf.hf_config("nemotronh")
    folder = tiny_hf.config_only(tmp_path / "nemotronh",
                                 {**config.to_dict(), "architectures": ["NemotronHForCausalLM"]})
    rc, out, _ = run_cli(capsys, "--model", str(folder), "--gpus", "4", "--gpu", "rtx-pro-6000", "--seq-len", "256",
                         "--global-batch", "8", "--max-micro-batch", "2", "--backend", "local", "--json")
    assert rc == 0
    rows = json.loads(out)
    assert any(r["fits"] for r in rows)
    assert any("hybrid_no_vpp" in r["refused"] for r in rows)  # the local builder's rule for hybrids


def test_the_text_table_names_refused_layouts_by_rule(capsys):
    rc, out, _ = run_cli(capsys, "--model", "tiny-moe", "--gpus", "8", "--gpu", "a100-80gb", "--seq-len", "256",
                         "--global-batch", "16", "--max-micro-batch", "1", "--top", "5")
    assert rc == 0
    assert "tiny-moe on 8 x NVIDIA A100 SXM4 80GB" in out and "Refused by the kit's rules" in out
    assert "heads_divisible_by_tp:" in out and "more (--top N, or --all)" in out


def test_the_gpu_profiles_and_their_sources(capsys):
    rc, out, _ = run_cli(capsys, "--list-gpus")
    assert rc == 0
    for key in ("h100-80gb", "h200", "a100-80gb", "a100-40gb", "rtx-pro-6000", "b200"):
        assert f"{key}: " in out
    assert out.count("source: ") == len(gpus.PROFILES) and "(measured)" in out  # the H200's rates
    rc, out, _ = run_cli(capsys, "--list-gpus", "--json")
    listed = json.loads(out)
    assert all(p["source"] and p["peak_bf16_tflops"] > 0 and p["inter_node_gb_per_s"] > 0 for p in listed.values())


def test_a_users_own_gpu(tmp_path, capsys):
    mine = {**gpus.PROFILES["h100-80gb"].to_dict(), "name": "my GPU", "memory_gib": 24.0, "source": "my lab"}
    del mine["gemm_fraction"], mine["elementwise_fraction"]
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(mine))
    assert gpus.resolve(str(path)).memory_gib == 24.0
    rc, out, _ = run_cli(capsys, "--model", "tiny-gpt", "--gpus", "2", "--gpu", str(path), "--seq-len", "256",
                         "--global-batch", "4", "--max-micro-batch", "1")
    assert rc == 0 and "my GPU" in out
    path.write_text(json.dumps({**mine, "peak_bf16_tflops": -1}))
    with pytest.raises(ValueError, match="peak_bf16_tflops must be positive"):
        gpus.load(path)
    path.write_text(json.dumps({"name": "x"}))
    with pytest.raises(ValueError, match="missing"):
        gpus.load(path)


@pytest.mark.parametrize("args, message", [
    (["--model", "no-such-model", "--gpus", "8"], "neither a preset"),
    (["--model", "tiny-gpt", "--gpus", "12"], "not whole nodes of 8"),
    (["--model", "tiny-gpt", "--gpus", "8", "--gpu", "no-such-gpu"], "unknown GPU"),
    (["--model", "tiny-gpt", "--gpus", "8", "--seq-len", "100000"], "seq_len"),
    (["--model", "tiny-gpt"], "--gpus are required"),
])
def test_bad_input_gets_one_clear_error(capsys, args, message):
    rc, _, err = run_cli(capsys, *args)
    assert rc == 2 and message in err and err.startswith("error: ")


def test_full_recompute_plans_the_recomputed_layer_in_its_backward():
    model = preset("llama3-8b")
    lay = Layout(nproc=8, tp=2, pp=4, sp=True, seq_len=4096, micro_batch=1, global_batch=16)
    full = plan_memory(model, lay, Training(recompute="full")).stage("first")
    none = plan_memory(model, lay, Training()).stage("first")
    saved, transient = layer_activation(model, lay, Training(), 0)
    # only each layer's input stays, but one layer's whole activations come back during its backward
    assert full.terms["activations"] < none.terms["activations"]
    assert full.terms["workspace"] >= saved + transient
    assert layer_activation(model, lay, Training(recompute="full"), 0) == (4096 // 2 * model.hidden_size * 2,
                                                                            saved + transient)
