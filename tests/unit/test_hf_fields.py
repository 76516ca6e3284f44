"""The config.json fields behind an HF tensor's shape (helpers/job/hf_fields.py), as the messages of
the shape check before start name them (tests/jobs/test_hf_shapes.py runs the check itself)."""
from helpers.job import hf_fields

# GLM-4.7-Flash's tiny config as transformers' Glm4MoeLiteConfig writes it when given head_dim=16
# beside qk_rope_head_dim=8: qk_rope_head_dim became 16 after qk_head_dim was worked out
GLM = {"model_type": "glm4_moe_lite", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
       "q_lora_rank": None, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 16, "v_head_dim": 16,
       "qk_head_dim": 24, "intermediate_size": 128, "moe_intermediate_size": 32, "vocab_size": 512}
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 96, "vocab_size": 512}


def test_the_mla_query_width_names_the_head_fields_and_head_dim():
    said = hf_fields.disagreements(GLM, "model.layers.0.self_attn.q_proj.weight", [96, 64])
    assert said == ["q_proj dim 0 = num_attention_heads 4 x (qk_nope_head_dim 16 + qk_rope_head_dim 16) = 128, "
                    "the safetensors 96 (4 x 24)"]
    assert "qk_head_dim 24" in hf_fields.notes(GLM) and "head_dim" in hf_fields.notes(GLM).replace("qk_", "")
    assert "24" in hf_fields.fix(GLM) and "no head_dim" in hf_fields.fix(GLM)
    consistent = {**GLM, "qk_head_dim": 32}
    assert hf_fields.notes(consistent) == "" and "no head_dim" not in hf_fields.fix(consistent)
    assert hf_fields.disagreements(GLM, "model.layers.0.self_attn.q_proj.weight", [128, 64]) == []


def test_plain_attention_mlp_experts_and_norms():
    assert hf_fields.disagreements({**LLAMA, "head_dim": 32}, "model.layers.1.self_attn.k_proj.weight", [32, 64]) == [
        "k_proj dim 0 = num_key_value_heads 2 x head_dim 32 = 64, the safetensors 32 (2 x 16)"]
    assert hf_fields.disagreements(LLAMA, "model.layers.0.mlp.down_proj.weight", [64, 160]) == [
        "down_proj dim 1 = intermediate_size 96, the safetensors 160"]
    assert hf_fields.disagreements(GLM, "model.layers.1.mlp.experts.3.up_proj.weight", [48, 64]) == [
        "up_proj dim 0 = moe_intermediate_size 32, the safetensors 48"]
    olmoe = {**LLAMA, "model_type": "olmoe", "num_key_value_heads": 4, "head_dim": 32}  # q/k norms over all heads
    assert hf_fields.disagreements(olmoe, "model.layers.0.self_attn.q_norm.weight", [64]) == [
        "q_norm dim 0 = num_attention_heads 4 x head_dim 32 = 128, the safetensors 64 (4 x 16)"]
    qwen3 = {**LLAMA, "model_type": "qwen3", "head_dim": 16}  # one norm of head_dim shared by the heads
    assert hf_fields.disagreements(qwen3, "model.layers.0.self_attn.k_norm.weight", [32]) == [
        "k_norm dim 0 = head_dim 16, the safetensors 32"]
    assert hf_fields.disagreements(LLAMA, "backbone.layers.0.mixer.norm.weight", [8]) == []  # not known: no words


def test_q_lora_rank_against_the_query_projections_held():
    lora = {"model.layers.0.self_attn.q_a_proj.weight", "model.layers.0.self_attn.q_b_proj.weight"}
    assert "set q_lora_rank to q_a_proj's rows" in hf_fields.q_lora_note(GLM, lora)
    assert "set q_lora_rank to null" in hf_fields.q_lora_note({**GLM, "q_lora_rank": 48},
                                                              {"model.layers.0.self_attn.q_proj.weight"})
    assert hf_fields.q_lora_note({**GLM, "q_lora_rank": 48}, lora) == ""
    assert hf_fields.q_lora_note(LLAMA, lora) == ""  # not MLA
