"""Bad HF import requests fail before any process starts, with one error naming problem and fix
(helpers/job/hf_model.py, runner.validate, the MLA layout rules); the TE import stand-in leaves
Megatron-Core seeing no Transformer Engine (helpers/runtime/hf/te_standin.py)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import launch
from helpers.job import architectures, hf_model
from helpers.launch import tiny_hf

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 160, "vocab_size": 512,
         "hidden_act": "silu", "max_position_embeddings": 256, "tie_word_embeddings": False}
DEEPSEEK = {**LLAMA, "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "num_key_value_heads": 4,
            "q_lora_rank": None, "kv_lora_rank": 30, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
            "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_shared_experts": 1,
            "first_k_dense_replace": 1}


def folder(tmp_path, config, weights=True):
    tmp_path.mkdir(parents=True, exist_ok=True)
    if config is not None and weights:
        return str(tiny_hf.config_only(tmp_path, config))  # the tensor names, no data: what is read before launch
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
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


NEMOTRON_H = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96,
              "vocab_size": 512, "layers_block_type": ["mamba", "moe", "attention", "mlp"], "mamba_num_heads": 8,
              "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 2, "n_routed_experts": 4,
              "num_experts_per_tok": 2, "moe_intermediate_size": 32, "moe_shared_expert_intermediate_size": 48,
              "n_shared_experts": 1, "max_position_embeddings": 256, "mlp_hidden_act": "relu2"}


def _rename_tensor(folder: str, old: str, new: str) -> None:
    """Rewrite the header of config_only's weightless safetensors with one name changed."""
    path = Path(folder) / "model.safetensors"
    raw = path.read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    header[new] = header.pop(old)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text)


def test_both_spellings_of_the_nemotron_h_embedding_pass_and_a_third_is_named_before_start(tmp_path):
    """transformers' save_pretrained spells it `backbone.embedding.weight`, the published checkpoints
    (and Bridge) `backbone.embeddings.weight`: both import (tests/jobs/test_hybrid.py trains the first
    at PP=2); any other spelling is found in the safetensors header before a process starts."""
    published = folder(tmp_path / "published", NEMOTRON_H)
    assert hf_model.problems(published) == []
    own = folder(tmp_path / "own", NEMOTRON_H)
    _rename_tensor(own, "backbone.embeddings.weight", "backbone.embedding.weight")
    assert hf_model.problems(own) == []
    other = folder(tmp_path / "other", NEMOTRON_H)
    _rename_tensor(other, "backbone.embeddings.weight", "backbone.embed.weight")
    message = refused(tmp_path, hf_model=other)
    assert "[hf_weights_unnamed]" in message and "backbone.embeddings.weight" in message
    assert "backbone.embed.weight" in message and "backbone.embedding.weight" in message  # what it has, what passes
    _rename_tensor(other, "backbone.layers.2.weight", "backbone.layer.2.weight")
    assert "backbone.layers.2.*" in refused(tmp_path, hf_model=other)


def _data_cut_short() -> bytes:
    """A header whose one tensor's 16 bytes are missing: a copy stopped after the header."""
    text = json.dumps({"model.embed_tokens.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    return len(text).to_bytes(8, "little") + text


@pytest.mark.parametrize("content", [b"\x00" * 4, b"", _data_cut_short()], ids=["header-cut", "empty", "data-cut"])
def test_an_unreadable_safetensors_file_is_named_before_start(tmp_path, content):
    hf = folder(tmp_path / "m", LLAMA)
    (Path(hf) / "model.safetensors").write_bytes(content)  # a truncated copy
    message = refused(tmp_path, hf_model=hf)
    assert "[hf_weights_unreadable]" in message and "model.safetensors" in message


STANDIN_CHECK = """
from helpers.runtime.compat import cpu as cpu_compat
cpu_compat.import_megatron_eagerly()
import sys, megatron.core
from helpers.runtime.hf import te_standin
te_standin.{call}
from megatron.bridge.utils.fusions import can_enable_gradient_accumulation_fusion
flags = sorted(n for n, m in list(sys.modules.items()) if n.startswith("megatron.core") and getattr(m, "HAVE_TE", None) is True)
from megatron.bridge.models.conversion.auto_bridge import AutoBridge
print("REGISTRY", ",".join(AutoBridge.list_supported_models()))
print(flags, "transformer_engine" in sys.modules, can_enable_gradient_accumulation_fusion())
"""


@pytest.mark.slow
@pytest.mark.parametrize("call", ["import_auto_bridge()", "import_auto_bridge(['LlamaForCausalLM'])"],
                         ids=["every-bridge", "one-architecture"])  # the second: helpers/runtime/hf/bridge_import.py
def test_bridge_imports_and_megatron_core_still_sees_no_te(call):
    """Also: Bridge's live registry is what helpers/job/architectures.py reads from its sources
    (all of it after the full import; the one architecture after the single-bridge import)."""
    out = subprocess.run([sys.executable, "-c", STANDIN_CHECK.format(call=call)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "[] False False"
    registry = next(line for line in lines if line.startswith("REGISTRY ")).split(" ", 1)[1]
    live = {a for a in registry.split(",") if a.endswith("ForCausalLM")}  # (diffusion bridges load elsewhere)
    assert live == (set(architectures.text_architectures()) if call == "import_auto_bridge()" else {"LlamaForCausalLM"})


BARE_THEN_CONFIG = """
from helpers.runtime.compat import cpu as cpu_compat
cpu_compat.import_megatron_eagerly()
import sys, megatron.core
from helpers.runtime.hf import te_standin
te_standin.import_auto_bridge(['LlamaForCausalLM'])
print("BARE", getattr(sys.modules["megatron.bridge.models"], "__kit_bare_package__", False))
with te_standin.training_config_imports():
    from megatron.bridge.training.config import ConfigContainer
print("CONFIG", ConfigContainer.__name__)
"""


@pytest.mark.slow
def test_bridge_s_training_config_imports_after_a_single_bridge_import():
    """The single-bridge import leaves Bridge's two packages without their `__init__`; Bridge's training
    config, imported later in the same process (a recipe checked in a notebook that exported a model),
    imports GPTModelProvider from one of them, so the stand-in lets the packages' own code run first."""
    out = subprocess.run([sys.executable, "-c", BARE_THEN_CONFIG], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-4:] == ["BARE", "True", "CONFIG", "ConfigContainer"]
