"""Config variants of a family's tiny model: the other values a user's checkpoint of that family
can hold for the choices its architecture leaves open, one choice changed at a time. Each is
generated from the fields transformers' config class of the family takes (a field it lacks gives no
variant), so a family gains the variants its class allows: tied or untied embeddings, 1, 2 or all
KV heads, attention and MLP biases, with and without q-LoRA, 0, 1 or k leading dense layers (and a
first_k_dense_replace that disagrees with mlp_layer_types), a shared expert or none, and each of
transformers' rope scaling kinds.

tests/jobs/test_hf_import.py builds every variant: each must be refused before start by a named
rule, or build and give transformers' logits and gradients. transformers is imported inside the
functions."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from helpers.job import families

ROPE_FACTOR = 4.0  # of the tiny models' 256 positions: 64 before scaling


@dataclass(frozen=True)
class Variant:
    family: str  # a tiny model's name (helpers/job/families.py TINY)
    name: str  # what changes, e.g. "kv_heads=1", "rope=yarn"
    changes: dict = field(default_factory=dict)  # over the tiny model's fields (tiny_hf.make's **changes)

    @property
    def id(self) -> str:
        return f"{self.family}-{self.name}"


def rope(kind: str, theta: float, head_dim: int, positions: int) -> dict:
    """transformers' rope_parameters of `kind`, scaled by ROPE_FACTOR from `positions` / ROPE_FACTOR
    positions, with the other values its published models use. Each kind's scaling acts on the tests'
    32-token sequences except dynamic NTK's, which starts past `positions` (refused for every family)."""
    original = {"original_max_position_embeddings": int(positions / ROPE_FACTOR)}
    scaled = {"rope_type": kind, "rope_theta": theta, "factor": ROPE_FACTOR}
    if kind in ("linear", "dynamic"):
        return scaled
    if kind == "yarn":
        return {**scaled, **original, "beta_fast": 32.0, "beta_slow": 1.0}
    if kind == "llama3":  # Llama 3.1's values (its factor is 8)
        return {**scaled, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    if kind == "longrope":  # one factor per rotary frequency: short (within the original positions), long
        half = head_dim // 2
        return {"rope_type": kind, "rope_theta": theta, **original, "short_factor": [1.0 + i / half for i in range(half)],
                "long_factor": [1.0 + 2 * i / half for i in range(half)]}
    raise ValueError(f"no rope variant of kind {kind!r}")


ROPE_KINDS = ("linear", "dynamic", "yarn", "llama3", "longrope")


def of(family: str) -> list[Variant]:
    """Every variant of the tiny model `family`, from its transformers config class's fields."""
    from helpers.launch import tiny_hf

    tiny = families.TINY[family]
    base = tiny_hf.hf_config(family)  # the tiny model's config as transformers completes it
    takes = set(inspect.signature(type(base).__init__).parameters)
    found = []

    def add(name, **changes):
        found.append(Variant(family, name, changes))

    def flip(key):
        if key in takes:
            add(f"{key}={not getattr(base, key)}", **{key: not getattr(base, key)})

    flip("tie_word_embeddings")
    mla = getattr(base, "kv_lora_rank", None) is not None
    heads = base.num_attention_heads
    if "num_key_value_heads" in takes and not mla:  # MLA's keys and values come from one latent
        for kv in sorted({1, 2, heads} - {base.num_key_value_heads}):
            add(f"kv_heads={kv}", num_key_value_heads=kv)
    flip("attention_bias")
    flip("mlp_bias")
    if "q_lora_rank" in takes:
        add("q_lora_rank=None" if base.q_lora_rank else "q_lora_rank=48", q_lora_rank=None if base.q_lora_rank else 48)
    layers = base.num_hidden_layers
    if getattr(base, "n_routed_experts", None) or getattr(base, "num_experts", None):
        found += dense_first(family, base, takes, layers)
    for key in ("n_shared_experts", "num_shared_experts"):
        if key in takes and (getattr(base, "n_routed_experts", None) or getattr(base, "num_experts", None)):
            add(f"{key}={0 if getattr(base, key) else 1}", **{key: 0 if getattr(base, key) else 1})
    params = getattr(base, "rope_parameters", None)
    if "rope_parameters" in takes and params and "rope_type" in params:  # one rotary for every layer
        head_dim = getattr(base, "qk_rope_head_dim", None) or getattr(base, "head_dim", None) or base.hidden_size // heads
        for kind in ROPE_KINDS:
            if params["rope_type"] != kind:
                add(f"rope={kind}", rope_parameters=rope(kind, params["rope_theta"], head_dim,
                                                         base.max_position_embeddings))
                if kind == "yarn":  # transformers rounds YaRN's correction range unless told not to
                    add("rope=yarn, truncate=false", rope_parameters={
                        **rope(kind, params["rope_theta"], head_dim, base.max_position_embeddings), "truncate": False})
            else:  # its own kind with other values (GPT-OSS: YaRN)
                add(f"rope={kind}, factor x2", rope_parameters={**params, "factor": 2 * params["factor"]})
        if "llama3" in ROPE_KINDS and params["rope_type"] != "llama3":  # the values Megatron fixes, changed
            other = rope("llama3", params["rope_theta"], head_dim, base.max_position_embeddings)
            add("rope=llama3, original_max_position_embeddings=64",
                rope_parameters={**other, "original_max_position_embeddings": 64})
    return found


def dense_first(family: str, base, takes: set, layers: int) -> list[Variant]:
    """Leading dense layers 0, 1 and 2 of the tiny model's 3 however its class says it, and the
    ways a config can say it inconsistently."""
    found = []
    k = 2
    if "first_k_dense_replace" in takes and "mlp_layer_types" not in takes:  # DeepSeek, GLM-4.5
        for n in sorted({0, 1, k} - {base.first_k_dense_replace}):
            found.append(Variant(family, f"first_k_dense_replace={n}", {"first_k_dense_replace": n}))
    elif "mlp_layer_types" in takes:  # GLM-4.7-Flash, Hunyuan V3: a kind per layer
        def kinds(n):
            return ["dense"] * n + ["sparse"] * (layers - n)
        extra = getattr(base, "first_k_dense_replace", None)  # a key the class does not take, written as given
        for n in (0, k):
            changes = {"mlp_layer_types": kinds(n)} | ({"first_k_dense_replace": n} if extra is not None else {})
            found.append(Variant(family, f"dense_layers={n}", changes))
        found.append(Variant(family, "first_k_dense_replace=2 (mlp_layer_types says 1)",
                             {"mlp_layer_types": kinds(1), "first_k_dense_replace": k}))
        if extra is not None:
            found.append(Variant(family, "no first_k_dense_replace", {"first_k_dense_replace": None}))
        found.append(Variant(family, "dense layer not leading",
                             {"mlp_layer_types": ["sparse", "dense"] + ["sparse"] * (layers - 2)}))
    if "mlp_only_layers" in takes:  # Qwen3-MoE: dense layers listed, or every decoder_sparse_step-th sparse
        found.append(Variant(family, "mlp_only_layers=[0]", {"mlp_only_layers": [0]}))
        found.append(Variant(family, "decoder_sparse_step=2", {"decoder_sparse_step": 2}))
    return found
