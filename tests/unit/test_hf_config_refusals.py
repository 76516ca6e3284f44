"""Config values a supported family is refused for, before start and by name (helpers/job/families.py
`config_refusals`, `rope_kinds`): each found by building the family's config variants against
transformers (tests/jobs/test_hf_import.py), here checked on config.json alone."""
import pytest

from helpers.job import hf_model
from helpers.launch import tiny_hf

BASE = {"num_hidden_layers": 3, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 512, "hidden_act": "silu", "max_position_embeddings": 256}
LLAMA = {**BASE, "architectures": ["LlamaForCausalLM"], "model_type": "llama"}
GLM_FLASH = {**BASE, "architectures": ["Glm4MoeLiteForCausalLM"], "model_type": "glm4_moe_lite", "kv_lora_rank": 32,
             "q_lora_rank": None, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
             "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_shared_experts": 1}
LLAMA3 = {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
YARN = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 64}


def refused(tmp_path, config: dict) -> list[str]:
    return [v.name for v in hf_model.problems(tiny_hf.config_only(tmp_path / "hf", config))]


@pytest.mark.parametrize("kinds, expected", [
    ((["dense", "sparse", "sparse"], None), []),  # Bridge's count when absent: 1
    ((["dense", "sparse", "sparse"], 1), []),
    ((["dense", "dense", "sparse"], None), ["hf_missing_dense_layer_count"]),
    ((["dense", "dense", "sparse"], 2), []),
    ((["sparse", "sparse", "sparse"], 0), []),
    ((["dense", "sparse", "sparse"], 2), ["hf_missing_dense_layer_count"]),
    ((["sparse", "dense", "sparse"], 0), ["hf_missing_sparse_layer_pattern"]),
])
def test_glm_flash_dense_layers_as_bridge_counts_them(tmp_path, kinds, expected):
    mlp_layer_types, first_k = kinds
    config = {**GLM_FLASH, "mlp_layer_types": mlp_layer_types}
    if first_k is not None:
        config["first_k_dense_replace"] = first_k
    assert refused(tmp_path, config) == expected


@pytest.mark.parametrize("config, expected", [
    (LLAMA, []),  # no rotary parameters: the class's default
    ({**LLAMA, "rope_parameters": LLAMA3}, []),
    ({**LLAMA, "rope_scaling": LLAMA3}, []),  # an older save's spelling
    ({**LLAMA, "rope_parameters": {**LLAMA3, "original_max_position_embeddings": 64}}, ["hf_missing_rope_scaling"]),
    ({**LLAMA, "rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 4.0}},
     ["hf_missing_rope_scaling"]),
    ({**LLAMA, "rope_parameters": {**YARN, "attention_factor": 1.2}}, ["hf_missing_rope_scaling"]),
    ({**LLAMA, "rope_parameters": YARN}, []),
    ({**LLAMA, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "rope_parameters": YARN},
     ["hf_missing_rope_scaling"]),
    ({**GLM_FLASH, "rope_parameters": {**YARN, "truncate": False}}, ["hf_missing_rope_scaling"]),
    ({**GLM_FLASH, "rope_parameters": {**YARN, "truncate": True}}, []),
])
def test_rotary_scaling_kinds_each_family_builds(tmp_path, config, expected):
    assert refused(tmp_path, config) == expected


@pytest.mark.parametrize("config, expected", [
    ({**GLM_FLASH, "tie_word_embeddings": True}, ["hf_missing_tied_embeddings"]),
    ({**LLAMA, "architectures": ["GemmaForCausalLM"], "model_type": "gemma", "tie_word_embeddings": False},
     ["hf_missing_untied_embeddings"]),
    ({**LLAMA, "tie_word_embeddings": True}, []),
    ({**LLAMA, "attention_bias": True}, ["hf_missing_attention_bias"]),
    ({**LLAMA, "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": False},
     ["hf_missing_no_attention_bias"]),
    ({**LLAMA, "mlp_bias": True}, ["hf_missing_mlp_bias"]),
    ({**GLM_FLASH, "n_shared_experts": 0}, ["hf_missing_no_shared_experts"]),
])
def test_embedding_ties_biases_and_shared_experts_bridge_builds_otherwise(tmp_path, config, expected):
    assert refused(tmp_path, config) == expected
