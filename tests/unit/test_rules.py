"""One validation path (helpers/job/rules/): every `auto` decided once, every problem of a job
reported at once by name before any process starts, for the Python API and the command line
alike, and each refusal the worker would raise after torchrun had started caught by a named
rule first."""
import json

import pytest

from helpers import launch
from helpers.job import rules
from helpers.job.rules.environment import Environment
from helpers.job.spec import JobSpec
from helpers.launch import cli, tiny_hf

HOPPER = Environment(cuda_devices=8, fp8_recipes=("tensorwise", "rowwise", "delayed"), fp8_note="Hopper")
NEMOTRON_H = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96,
              "vocab_size": 512, "layers_block_type": ["mamba", "moe", "attention", "mlp"], "mamba_num_heads": 8,
              "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 2, "n_routed_experts": 4,
              "num_experts_per_tok": 2, "moe_intermediate_size": 32, "moe_shared_expert_intermediate_size": 48,
              "n_shared_experts": 1, "max_position_embeddings": 256, "mlp_hidden_act": "relu2"}


def names(spec: JobSpec, env: Environment = rules.CPU_ONLY) -> list[str]:
    return [v.name for v in rules.check(rules.resolve(spec, env), env).violations]


def hf_folder(tmp_path, config: dict) -> str:
    return str(tiny_hf.config_only(tmp_path, config))  # tensor names, no data: what is read before launch


def sft_file(tmp_path, rows: list) -> str:
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_resolve_decides_every_auto_once():
    cpu, gpu = rules.resolve(JobSpec(), rules.CPU_ONLY).spec, rules.resolve(JobSpec(), HOPPER).spec
    assert (cpu.device, cpu.precision, cpu.backend, cpu.attention) == ("cpu", "fp32", "local", "sdpa")
    assert (gpu.device, gpu.precision, gpu.backend, gpu.attention) == ("cuda", "bf16", "local", "sdpa")
    assert "auto" not in {gpu.device, gpu.precision, gpu.backend, gpu.attention}
    assert rules.resolve(JobSpec(precision="fp8"), HOPPER).spec.precision == "fp8"  # only autos change


def test_every_problem_is_reported_at_once_with_a_fix():
    spec = JobSpec(tp=3, pp=3, lr=1e-3, min_lr=1e-2, precision="fp8", data="wikitext", tokenizer="gpt2",
                   data_dir="generated")
    found = rules.check(rules.resolve(spec, rules.CPU_ONLY), rules.CPU_ONLY).violations
    assert {v.name for v in found} >= {"heads_divisible_by_tp", "layers_divisible_by_pp", "lr_order", "fp8_needs_gpu",
                                       "tokenizer_exceeds_vocab"}
    assert all(v.fix for v in found)
    with pytest.raises(launch.InvalidJob) as err:
        launch.validate(spec)
    assert set(err.value.names) == {v.name for v in found} and "problem(s)" in str(err.value)


def test_the_command_line_meets_the_same_rules(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--tp", "3", "--pp", "3", "--out", str(tmp_path)])
    assert "heads_divisible_by_tp" in str(done.value) and "layers_divisible_by_pp" in str(done.value)
    assert not any(tmp_path.iterdir())  # no run directory: nothing started


@pytest.mark.parametrize("case", ["fp8_hybrid", "sft_empty_split", "sft_bad_line", "megatron_local_cp",
                                  "megatron_local_mla", "normalization"])
def test_what_the_worker_refused_after_start_is_a_named_rule_before_start(case, tmp_path):
    """Each of these would fail inside torchrun (a RuntimeError in the model builder, a ValueError
    in the data preparation, an assertion in Megatron's attention); each is a named violation first."""
    one_example = [{"prompt": "a", "response": "b"}]
    cases = {  # each made only when asked for: the SFT cases write the same file
        "fp8_hybrid": lambda: (JobSpec(hf_model=hf_folder(tmp_path / "nh", NEMOTRON_H), precision="fp8",
                                       device="cuda", seq_len=64, backend="local"), HOPPER, "fp8_not_built_for_hybrid"),
        "sft_empty_split": lambda: (JobSpec(data="sft", data_dir=sft_file(tmp_path, one_example * 3)),
                                    rules.CPU_ONLY, "data_split_empty"),
        "sft_bad_line": lambda: (JobSpec(data="sft", data_dir=sft_file(tmp_path, [{"prompt": "a", "reply": "b"}] * 20)),
                                 rules.CPU_ONLY, "data_unreadable"),
        "megatron_local_cp": lambda: (JobSpec(attention="megatron_local", cp=2), rules.CPU_ONLY,
                                      "megatron_local_attention_no_cp"),
        "megatron_local_mla": lambda: (JobSpec(attention="megatron_local", model="deepseek-v2-lite", pp=2,
                                               first_stage_layers=14, last_stage_layers=13, ep=8, nproc=16),
                                       rules.CPU_ONLY, "megatron_local_attention_no_mla"),
        "normalization": lambda: (JobSpec(model_overrides={"normalization": "ScaleNorm"}), rules.CPU_ONLY,
                                  "kit_worker_lacks_feature"),
    }
    spec, env, name = cases[case]()
    assert name in names(spec, env), names(spec, env)


def test_a_refused_job_starts_nothing(tmp_path):
    with pytest.raises(launch.InvalidJob, match="fp8_needs_gpu"):
        launch.run(precision="fp8", device="cpu", out=str(tmp_path), progress=False)
    assert not any(tmp_path.iterdir())


def test_a_valid_job_has_no_violation():
    assert names(JobSpec(tp=2, pp=2, nproc=8)) == []
    assert names(JobSpec(model="tiny-moe", tp=2, sp=True, ep=2, nproc=4)) == []
    assert names(JobSpec(precision="fp8", seq_len=64, device="cuda"), HOPPER) == []


GPT_OSS = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 2, "hidden_size": 64,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 48,
           "vocab_size": 512, "hidden_act": "silu", "num_local_experts": 4, "num_experts_per_tok": 2,
           "attention_bias": True, "sliding_window": 8, "max_position_embeddings": 256}


def test_attention_sinks_choose_megatron_attention_and_refuse_what_it_cannot_do(tmp_path):
    """GPT-OSS: auto attention is Megatron's own local one (the one that computes sinks); SDPA and biased
    experts at ETP > 1 are named before start; it trains at TP=2+SP with ETP=1."""
    hf = hf_folder(tmp_path / "gptoss", GPT_OSS)
    assert rules.resolve(JobSpec(hf_model=hf), rules.CPU_ONLY).spec.attention == "megatron_local"
    assert names(JobSpec(hf_model=hf, ep=2, nproc=2)) == []
    assert "sdpa_no_attention_sinks" in names(JobSpec(hf_model=hf, attention="sdpa"))
    assert "moe_bias_needs_etp1" in names(JobSpec(hf_model=hf, tp=2, sp=True, nproc=2))
    assert names(JobSpec(hf_model=hf, tp=2, sp=True, etp=1, nproc=2)) == []


def test_soft_capped_attention_refuses_context_parallel(tmp_path):
    gemma2 = {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "num_hidden_layers": 2, "hidden_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128,
              "vocab_size": 512, "hidden_activation": "gelu_pytorch_tanh", "attn_logit_softcapping": 50.0,
              "tie_word_embeddings": True, "max_position_embeddings": 256}
    hf = hf_folder(tmp_path / "g2", gemma2)
    assert "softcap_attention_no_cp" in names(JobSpec(hf_model=hf, cp=2, nproc=2))
    assert names(JobSpec(hf_model=hf, tp=2, sp=True, nproc=2)) == []
