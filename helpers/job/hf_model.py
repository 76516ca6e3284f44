"""A Hugging Face model folder, as the notebook side sees it: its config.json read as plain JSON
(no torch, no transformers), checked, and described as a ModelPreset so the layout rules, the
memory planner and the run records treat an imported model like a preset. The worker imports the
weights through Megatron-Bridge (helpers/runtime/hf/config.py, hf_weights.py).

Architectures: helpers/job/architectures.py says, for every text-only causal LM Megatron-Bridge
registers, whether the kit builds it (checked against transformers) or refuses it, naming the
missing piece; a refused one is turned away here, before start, rather than trained as a subtly
different model."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from helpers.errors import InvalidJob
from helpers.job import architectures, hf_names
from helpers.job.models import ModelPreset
from helpers.job.rules.violation import Found, Violation

HYBRID_SYMBOLS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}  # Megatron's hybrid_layer_pattern
# model types with q/k norms (others say use_qk_norm)
QK_NORM = ("qwen3", "qwen3_moe", "olmoe", "hy_v3", "gemma3_text")
FULL_WIDTH_QK_NORM = ("olmoe",)  # ... over all heads at once
QKV_BIAS = ("qwen2",)  # model types with Q/K/V biases (others say attention_bias)
ALL_BIASES = ("gpt_oss",)  # ... with biases on every linear layer, the router's too
SANDWICH_NORMS = ("gemma2", "gemma3_text")  # ... with norms after attention and after the MLP
ATTENTION_SINKS = ("gpt_oss",)  # ... with a learned softmax offset per head (Megatron's own attention)
CONFIG = "config.json"
WEIGHT_SUFFIXES = (".safetensors",)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def problems(folder: str | Path) -> list[Violation]:
    """What stops the kit from importing the HF folder (rules/hf.py reports them with the job's other
    problems): no folder, no config.json, unreadable JSON, an architecture the kit does not build,
    no safetensors weights."""
    v = Found("hf")
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        v.add("hf_model_not_a_folder", f"hf_model={str(folder)!r} is not a folder",
              "give the local folder of a Hugging Face model (config.json + *.safetensors), e.g. one saved with "
              "save_pretrained() or made by helpers.launch.tiny_hf.make(); the kit never downloads")
        return v
    path = folder / CONFIG
    if not path.is_file():
        v.add("hf_model_no_config", f"hf_model folder {str(folder)!r} has no {CONFIG}: it is not a Hugging Face "
              "model folder", "save one with model.save_pretrained(folder)")
        return v
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        v.add("hf_model_config_unreadable", f"{path} cannot be read as JSON ({e})",
              "re-save the model with save_pretrained()")
        return v
    v += architecture_problems(path, config)
    if not any(f.suffix in WEIGHT_SUFFIXES for f in folder.iterdir()):
        v.add("hf_model_no_weights", f"hf_model folder {str(folder)!r} has no *.safetensors weights",
              "save the model with save_pretrained() (safetensors is its default)")
    elif not v:  # a supported architecture: the tensors Bridge will look up are there (headers only)
        v += hf_names.problems(folder, architecture(config), config)
    return v


def architecture(config: dict) -> str | None:
    """The config's architecture the kit builds (the first listed one it supports)."""
    return next((a for a in config.get("architectures") or () if a in architectures.SUPPORTED), None)


def architecture_problems(path: Path, config: dict) -> list[Violation]:
    """The config's architecture against helpers/job/architectures.py: supported, refused with the
    missing pieces named (hf_missing_<piece>), or not a text-only causal LM Bridge maps."""
    v = Found("hf")
    listed = config.get("architectures") or []
    supported = ", ".join(architectures.SUPPORTED)
    text = architectures.text_architectures()
    arch = next((a for a in listed if a in architectures.SUPPORTED), None) or next((a for a in listed if a in text),
                                                                                   None)
    if arch is None:
        registered = {r.architecture for r in architectures.bridge_registrations()}
        what = ("not a text-only causal LM (Megatron-Bridge maps it to a vision/audio model)"
                if any(a in registered for a in listed) else "not one Megatron-Bridge maps")
        v.add("hf_architecture_not_built", f"{path}: architecture {listed or '(none listed)'} is {what}; the kit "
              f"imports {supported}", "python -m helpers --list-architectures shows every architecture Bridge maps "
              "and why each other one is refused")
        return v
    family = architectures.SUPPORTED.get(arch) or architectures.REFUSED.get(arch)
    for piece in architectures.refusal(arch, config):
        v.add(f"hf_missing_{piece.name}", f"{path}: {family.family if family else arch} ({arch}) is refused: "
              f"missing {piece.message()}", piece.fix)
    return v


def read_config(folder: str | Path) -> dict:
    """config.json of a local HF folder; InvalidJob naming the problems and the fixes otherwise."""
    found = problems(folder)
    if found:
        raise InvalidJob("\n".join(str(p) for p in found), found)
    return json.loads((Path(folder).expanduser() / CONFIG).read_text())


def has_tokenizer(folder: str | Path) -> bool:
    return any((Path(folder) / f).is_file() for f in TOKENIZER_FILES)


def needs_megatron_attention(folder: str | Path | None) -> bool:
    """The folder's model has attention sinks, which only Megatron's own local attention computes
    (helpers/job/rules/resolve.py picks it for attention='auto'); False when unreadable."""
    try:
        return json.loads((Path(folder).expanduser() / CONFIG).read_text()).get("model_type") in ATTENTION_SINKS
    except (OSError, ValueError, TypeError):
        return False


def config_hash(folder: str | Path) -> str:
    """SHA-256 of config.json: what the run records say was imported."""
    return hashlib.sha256((Path(folder) / CONFIG).read_bytes()).hexdigest()


def describe(folder: str | Path) -> ModelPreset:
    """The imported model's architecture in the kit's terms (what the layout rules check)."""
    c = read_config(folder)
    if c.get("model_type") == "nemotron_h":
        return describe_hybrid(folder, c)
    heads = c["num_attention_heads"]
    head_dim = c.get("head_dim")
    mla = c.get("kv_lora_rank") is not None  # DeepSeek-V2/V3 (and their relatives): multi-latent attention
    experts = c.get("num_experts") or c.get("num_local_experts") or c.get("n_routed_experts")
    first_k = c.get("first_k_dense_replace") or leading_dense(c.get("mlp_layer_types") or [])
    if first_k >= c["num_hidden_layers"]:
        experts = None  # every layer dense: no expert is ever built
    moe_ffn = c.get("moe_intermediate_size") or (c["intermediate_size"] if experts else None)  # OLMoE: one width
    shared = (c.get("n_shared_experts") or c.get("num_shared_experts") or 0) * (moe_ffn or 0)
    return ModelPreset(
        name=Path(folder).expanduser().resolve().name,
        num_layers=c["num_hidden_layers"], hidden_size=c["hidden_size"], num_attention_heads=heads,
        ffn_hidden_size=c["intermediate_size"], vocab_size=c["vocab_size"],
        num_query_groups=c.get("num_key_value_heads") or heads,
        kv_channels=None if mla or not head_dim or head_dim == c["hidden_size"] // heads else head_dim,
        num_experts=experts or None, moe_router_topk=c.get("num_experts_per_tok") or 2,
        moe_ffn_hidden_size=moe_ffn if experts else None,
        moe_shared_expert_intermediate_size=shared or None,
        num_shared_experts=c.get("n_shared_experts") or c.get("num_shared_experts") or 0,
        first_k_dense=first_k if experts else 0,
        normalization="RMSNorm", activation=activation(c),
        qk_layernorm=c.get("model_type") in QK_NORM or bool(c.get("use_qk_norm")),
        qk_norm_full_width=c.get("model_type") in FULL_WIDTH_QK_NORM,
        add_qkv_bias=bool(c.get("attention_bias")) or c.get("model_type") in QKV_BIAS,
        add_bias_linear=c.get("model_type") in ALL_BIASES, attention_sinks=c.get("model_type") in ATTENTION_SINKS,
        attention_softcap=bool(c.get("attn_logit_softcapping")), sandwich_norms=c.get("model_type") in SANDWICH_NORMS,
        max_seq_len=c.get("max_position_embeddings", 4096),
        tied_embeddings=bool(c.get("tie_word_embeddings", False)),
        multi_latent_attention=mla, q_lora_rank=c.get("q_lora_rank") if mla else None,
        kv_lora_rank=c.get("kv_lora_rank") if mla else None,
        qk_head_dim=c.get("qk_nope_head_dim") if mla else None,
        qk_pos_emb_head_dim=c.get("qk_rope_head_dim") if mla else None,
        v_head_dim=c.get("v_head_dim") if mla else None, built_from_hf=True,
        source=f"Hugging Face folder {Path(folder).name} ({', '.join(c['architectures'])})",
    )


GELU_TANH = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")


def activation(c: dict) -> str:
    """The kit's name of the MLP's activation: every decoder family here gates its MLP."""
    act = c.get("hidden_activation") or c.get("hidden_act")
    return "swiglu" if act == "silu" else "geglu" if act in GELU_TANH else act


def leading_dense(mlp_layer_types: list[str]) -> int:
    """How many layers lead with a dense MLP, from GLM-4.7-Flash's mlp_layer_types ("dense"/"sparse")."""
    count = 0
    for kind in mlp_layer_types:
        if kind != "dense":
            break
        count += 1
    return count


def describe_hybrid(folder, c: dict) -> ModelPreset:
    """Nemotron-H: one layer per entry of layers_block_type (or the older hybrid_override_pattern).
    `c` is the config.json dict; `folder` only names the model (a results file has no folder)."""
    pattern = c.get("hybrid_override_pattern") or "".join(HYBRID_SYMBOLS[k] for k in c["layers_block_type"])
    heads = c["num_attention_heads"]
    head_dim = c.get("head_dim")
    experts = c.get("n_routed_experts") if "E" in pattern else None
    return ModelPreset(
        name=Path(folder).expanduser().resolve().name,
        num_layers=len(pattern), hidden_size=c["hidden_size"], num_attention_heads=heads,
        ffn_hidden_size=c["intermediate_size"], vocab_size=c["vocab_size"],
        num_query_groups=c.get("num_key_value_heads") or heads,
        kv_channels=None if not head_dim or head_dim == c["hidden_size"] // heads else head_dim,
        num_experts=experts, moe_router_topk=c.get("num_experts_per_tok") or 2,
        moe_ffn_hidden_size=c.get("moe_intermediate_size") if experts else None,
        moe_shared_expert_intermediate_size=(c.get("moe_shared_expert_intermediate_size") if experts else None),
        num_shared_experts=(c.get("n_shared_experts") or 0) if experts else 0,
        normalization="RMSNorm",
        activation="squared_relu" if c.get("mlp_hidden_act", "relu2") == "relu2" else c.get("mlp_hidden_act"),
        max_seq_len=c.get("max_position_embeddings", 4096),
        tied_embeddings=bool(c.get("tie_word_embeddings", False)),
        hybrid_pattern=pattern, mamba_num_heads=c["mamba_num_heads"], mamba_head_dim=c["mamba_head_dim"],
        mamba_state_dim=c["ssm_state_size"], mamba_num_groups=c["n_groups"],
        mamba_chunk_size=c.get("chunk_size", 128), built_from_hf=True,
        source=f"Hugging Face folder {Path(folder).name} ({', '.join(c['architectures'])})",
    )
