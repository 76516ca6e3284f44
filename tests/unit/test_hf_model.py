"""Bad HF import requests fail before any process starts, with one error naming problem and fix
(helpers/job/hf_model.py, runner.validate, the MLA layout rules); the TE import stand-in leaves
Megatron-Core seeing no Transformer Engine (helpers/runtime/hf/te_standin.py)."""
import json
import subprocess
import sys

import pytest

from helpers import launch
from helpers.job import hf_model

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 160, "vocab_size": 512,
         "hidden_act": "silu", "max_position_embeddings": 256, "tie_word_embeddings": False}
DEEPSEEK = {**LLAMA, "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "num_key_value_heads": 4,
            "q_lora_rank": None, "kv_lora_rank": 30, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
            "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_shared_experts": 1,
            "first_k_dense_replace": 1}


def folder(tmp_path, config, weights=True):
    tmp_path.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    if weights:
        (tmp_path / "model.safetensors").write_bytes(b"")  # only its presence is checked before launch
    return str(tmp_path)


def refused(tmp_path, **job):
    with pytest.raises(launch.InvalidJob) as err:
        launch.run(out=str(tmp_path / "runs"), device="cpu", progress=False, **job)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # nothing started
    return str(err.value)


def test_missing_folder(tmp_path):
    assert "is not a folder" in refused(tmp_path, hf_model=str(tmp_path / "nowhere"))


def test_folder_without_config(tmp_path):
    assert "has no config.json" in refused(tmp_path, hf_model=folder(tmp_path / "m", None))


def test_architecture_the_kit_does_not_import(tmp_path):
    message = refused(tmp_path, hf_model=folder(tmp_path / "m", {**LLAMA, "architectures": ["GPTOSSForCausalLM"]}))
    assert "GPTOSSForCausalLM" in message and "LlamaForCausalLM" in message


def test_folder_without_weights(tmp_path):
    assert "no *.safetensors" in refused(tmp_path, hf_model=folder(tmp_path / "m", LLAMA, weights=False))


def test_heads_not_divisible_by_tp(tmp_path):
    assert "heads_divisible_by_tp" in refused(tmp_path, hf_model=folder(tmp_path / "m", LLAMA), tp=3, nproc=3)


def test_mla_latent_not_divisible_by_tp(tmp_path):
    message = refused(tmp_path, hf_model=folder(tmp_path / "m", DEEPSEEK), tp=4, sp=True, nproc=4)
    assert "mla_kv_down_divisible_by_tp" in message and "30 + 8 = 38" in message


def test_export_needs_hf_model_and_a_tokenizer(tmp_path):
    assert "needs hf_model" in refused(tmp_path, export_hf=str(tmp_path / "out"))
    assert "tokenizer" in refused(tmp_path, hf_model=folder(tmp_path / "m", LLAMA), export_hf=str(tmp_path / "out"))


def test_description_follows_config_json(tmp_path):
    m = hf_model.describe(folder(tmp_path / "ds", DEEPSEEK))
    assert (m.multi_latent_attention, m.kv_lora_rank, m.qk_pos_emb_head_dim, m.q_lora_rank) == (True, 30, 8, None)
    assert (m.num_experts, m.first_k_dense, m.moe_shared_expert_intermediate_size) == (4, 1, 32)
    dense = hf_model.describe(folder(tmp_path / "dense", {**DEEPSEEK, "first_k_dense_replace": 2}))
    assert not dense.is_moe  # every layer dense: no experts are built, so MoE layout rules do not apply
    q = hf_model.describe(folder(tmp_path / "q", {**LLAMA, "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
                                                  "head_dim": 32, "tie_word_embeddings": True}))
    assert (q.kv_channels, q.qk_layernorm, q.tied_embeddings, q.activation) == (32, True, True, "swiglu")


STANDIN_CHECK = """
from helpers.runtime.compat import cpu as cpu_compat
cpu_compat.import_megatron_eagerly()
import sys, megatron.core
from helpers.runtime.hf import te_standin
te_standin.{call}
from megatron.bridge.utils.fusions import can_enable_gradient_accumulation_fusion
flags = sorted(n for n, m in list(sys.modules.items()) if n.startswith("megatron.core") and getattr(m, "HAVE_TE", None) is True)
print(flags, "transformer_engine" in sys.modules, can_enable_gradient_accumulation_fusion())
"""


@pytest.mark.parametrize("call", ["import_auto_bridge()", "import_auto_bridge(['LlamaForCausalLM'])"],
                         ids=["every-bridge", "one-architecture"])  # the second: helpers/runtime/hf/bridge_import.py
def test_bridge_imports_and_megatron_core_still_sees_no_te(call):
    out = subprocess.run([sys.executable, "-c", STANDIN_CHECK.format(call=call)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[] False False"
