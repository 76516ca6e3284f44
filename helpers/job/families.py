"""One record per Hugging Face model family: everything the kit knows about it, in one place.

A record says which architectures (config.json "architectures") and model types ("model_type") are
the family's, what the kit's builder adds for it beyond what config.json's values say, where Bridge
looks for its tensors when they are not under model.*, how its tiny random model is made
(transformers' config class and the overrides of TINY_COMMON), and what the family's row of the
architecture table says, or the pieces the kit lacks for it. Readers: helpers/job/hf_model.py
(config.json described), helpers/job/architectures.py (supported or refused), helpers/job/hf_names.py
(tensor names), helpers/runtime/hf/config.py (the provider's flags for the builder),
helpers/launch/tiny_hf.py (tiny models). Adding a family is adding its record to FAMILIES, and the
layouts its tiny model is checked at to tests/hf_families.py.

What config.json states itself (sliding windows, soft caps, MLA, experts and their routing, QKV
biases when attention_bias says so, q/k norms when use_qk_norm does) is read from config.json, not
from here: a family flag for it would be a second answer that could disagree with the file.

Pure data, no torch: the notebook side imports it."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

PER_HEAD = "per_head"  # one q and one k norm of head_dim, shared by the heads
# One norm over all heads at once, heads x head_dim (layers/full_width_qk_norm.py): Bridge builds it
# with its own attention class in a TE layer spec, which the kit replaces.
FULL_WIDTH = "full_width"

# What every tiny model shares; a family's Tiny.fields override it.
TINY_VOCAB = 512  # the tiny models' vocabulary; the byte tokenizer (helpers/launch/tiny_hf.py) uses 257 of it
TINY_EOS = 256  # the byte tokenizer's <|endoftext|>
TINY_COMMON = dict(vocab_size=TINY_VOCAB, hidden_size=64, num_attention_heads=4, max_position_embeddings=256,
                   rms_norm_eps=1e-5, initializer_range=0.05, tie_word_embeddings=False)
# Gemma's configs default to pad_token_id 0: transformers then zeroes that embedding row and masks its
# gradient (padding_idx), which Megatron's embedding does not. The kit's tests feed token 0, and a
# zero row through a norm with eps 1e-6 gives that row gradients of ~1e6 (measured on the Gemma 3 tiny
# model: a first gradient norm of 1.5e6, against 35 elsewhere), which makes training's rounding
# chaotic. No pad token: the row is random and both sides compute the same gradient.
NO_PAD = dict(pad_token_id=None)


def default_rope(theta: float, **more) -> dict:
    """transformers' rope_parameters for plain rotary embeddings of base `theta`."""
    return {"rope_type": "default", "rope_theta": theta, **more}


@dataclass(frozen=True)
class Tiny:
    """A tiny random model of the family, made offline (helpers/launch/tiny_hf.py)."""
    name: str  # tiny_hf.make(name, folder)
    config_class: str  # transformers' config class
    fields: dict  # over TINY_COMMON
    without: tuple[str, ...] = ()  # TINY_COMMON keys the config class does not take
    pattern_key: str | None = None  # the per-layer list num_layers repeats (hybrids), else num_hidden_layers


@dataclass(frozen=True)
class ConfigRefusal:
    """A config.json value that refuses a supported family: `applies(config.get(key))`, or
    `applies(config)` for a rule over several keys (key None). Found by building every config
    variant of the family's tiny model (tests/jobs/hf_variants.py): a variant the worker could
    not build, or built as another model than transformers', gets a refusal here."""
    key: str | None
    applies: Callable[[object], bool]
    piece: str  # a Piece of helpers/job/architectures.py
    says: str  # the refused config in config.json's words, for the family's row of the architecture table


@dataclass(frozen=True)
class Family:
    name: str  # as the architecture table and the refusals name it
    architectures: tuple[str, ...]
    model_types: tuple[str, ...] = ()
    # What the kit's builder adds for the family, beyond what config.json's values say:
    qk_norm: str | None = None  # PER_HEAD | FULL_WIDTH: q/k norms though config.json has no use_qk_norm
    qkv_bias: bool = False  # biases on the Q, K and V projections though config.json has no attention_bias
    all_biases: bool = False  # biases on every linear layer, the router's too
    attention_sinks: bool = False  # a learned softmax offset per head: only Megatron's own local attention
    sandwich_norms: bool = False  # norms after attention and after the MLP too (layers/post_norm.py)
    # Embeddings x sqrt(hidden) (layers/embedding_scale.py): Bridge does it in its providers' provide(),
    # which the kit does not call.
    scaled_embedding: bool = False
    local_global_rotary: bool = False  # a rotary base per kind of layer (layers/local_global_rotary.py)
    zero_centered_norms: bool = False  # norm weights store gain - 1 (the norm multiplies by 1 + weight)
    hybrid: bool = False  # Mamba/attention/MLP layers by pattern (hf_model.describe_hybrid)
    # Bridge's names of the embedding, the final norm and the layers' prefix, when not model.*
    tensors: tuple[str, str, str] | None = None
    tensor_aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)  # Bridge's name: folders' others
    config_refusals: tuple[ConfigRefusal, ...] = ()
    # The rotary scaling kinds (rope_type) the kit builds as transformers computes them, each with the
    # values it must have (a tuple: one of them; ABSENT: the key not there); any other kind is refused
    # (rope_outside).
    rope_kinds: dict = field(default_factory=lambda: dict(DEFAULT_ROPE))
    tiny: tuple[Tiny, ...] = ()
    # Its row of the architecture table (python -m helpers --list-architectures) when supported:
    exercises: str = ""  # what the tiny model exercises in the kit's builder
    missing: tuple[str, ...] = ()  # refused: the Pieces (helpers/job/architectures.py) the kit lacks

    @property
    def supported(self) -> bool:
        return not self.missing


ABSENT = "(absent)"
DEFAULT_ROPE = {"default": {}}
# YaRN as Bridge maps it (factor, original positions, beta_fast/slow, mscale, truncate; rounding the
# correction range unless truncate=false, as transformers does: helpers/runtime/hf/config.py):
# transformers' attention_factor has no Megatron counterpart.
YARN = {"attention_factor": ABSENT}
ROPE_WITH_YARN = {**DEFAULT_ROPE, "yarn": YARN}


def rope_parameters(config: dict) -> dict | None:
    """The rotary parameters config.json gives every layer (rope_parameters, or the rope_scaling of
    older saves); None when it gives none (transformers then uses its config class's default, GPT-OSS's
    being its published YaRN) or they differ by kind of layer (Gemma 3's)."""
    params = config.get("rope_parameters") or config.get("rope_scaling")
    if params and "rope_type" not in params and "type" not in params and all(
            isinstance(v, dict) for v in params.values()):
        return None
    return params or None


def rope_outside(kinds: dict) -> Callable[[dict], bool]:
    """A rule over config.json: a rotary scaling kind not in `kinds`, or one without the values it
    must have there."""
    def applies(config: dict) -> bool:
        params = rope_parameters(config)
        if params is None:
            return False
        kind = params.get("rope_type") or params.get("type") or "default"
        return kind not in kinds or any(params.get(k, ABSENT) not in (v if isinstance(v, tuple) else (v,))
                                        for k, v in kinds[kind].items())
    return applies


def dense_layers(config: dict) -> tuple[int, bool]:
    """From mlp_layer_types: how many layers lead with a dense MLP, and whether every other one is sparse."""
    kinds = config.get("mlp_layer_types") or []
    leading = next((i for i, kind in enumerate(kinds) if kind != "dense"), len(kinds))
    return leading, all(kind == "sparse" for kind in kinds[leading:])


def first_k_disagrees(absent: int | None) -> Callable[[dict], bool]:
    """A rule over config.json: Bridge's count of leading dense layers (first_k_dense_replace, `absent`
    when not there) is not the one mlp_layer_types gives transformers. `absent` None: a missing key is
    another rule's."""
    def applies(config: dict) -> bool:
        if not config.get("mlp_layer_types"):
            return False
        first_k = config["first_k_dense_replace"] if "first_k_dense_replace" in config else absent
        if first_k is None:  # Bridge would fail on it; a family with no default has its own rule for it
            return absent is not None
        return first_k != dense_layers(config)[0]
    return applies


# Refusals found by building the families' config variants (see ConfigRefusal)
TIED = ConfigRefusal("tie_word_embeddings", lambda value: bool(value), "tied_embeddings", "tie_word_embeddings=true")
UNTIED = ConfigRefusal("tie_word_embeddings", lambda value: value is False, "untied_embeddings",
                       "tie_word_embeddings=false")
ATTENTION_BIAS = ConfigRefusal("attention_bias", lambda value: bool(value), "attention_bias", "attention_bias=true")
MLP_BIAS = ConfigRefusal("mlp_bias", lambda value: bool(value), "mlp_bias", "mlp_bias=true")


def no_shared_experts(key: str) -> ConfigRefusal:
    return ConfigRefusal(key, lambda value: value == 0, "no_shared_experts", f"{key}=0")


# mlp_layer_types (GLM-4.7-Flash, Hunyuan V3): only leading dense layers, as many as Bridge counts
SPARSE_AFTER_DENSE = ConfigRefusal(None, lambda config: not dense_layers(config)[1], "sparse_layer_pattern",
                                   "a dense layer after a sparse one in mlp_layer_types")


def follows_five_to_one(layer_types: list[str] | None) -> bool:
    """Gemma 3's layer_types as Megatron-Bridge builds them (interleaved_attn_pattern (5, 1), fixed
    in its provider): every sixth layer full, the others sliding. Absent: transformers' default, the same."""
    return layer_types is None or layer_types == [
        "full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(len(layer_types))]


# DeepSeek-V2's tiny models, with q-LoRA (dsv2) and without (dsv2lite). HF DeepSeek-V2 builds its
# q_a/kv_a norms with eps 1e-6 whatever rms_norm_eps says, while Megatron uses one epsilon for every
# norm: 1e-6 (what the real checkpoints use) makes them agree.
DSV2 = dict(rms_norm_eps=1e-6, intermediate_size=128, num_hidden_layers=3, num_key_value_heads=4, q_lora_rank=48,
            kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=4,
            num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=1,
            topk_method="greedy", norm_topk_prob=False, routed_scaling_factor=1.0, rope_parameters=default_rope(3e4))
# Gemma: norms with a (1 + weight) gain, embeddings x sqrt(hidden), GeGLU.
GEMMA = dict(**NO_PAD, tie_word_embeddings=True, intermediate_size=128, head_dim=32,
             hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6)

FAMILIES = (
    Family(
        "Llama", ("LlamaForCausalLM",), ("llama",),
        config_refusals=(ATTENTION_BIAS, MLP_BIAS),
        # Megatron's Llama 3 scaling takes the factor only: the other values are fixed in it
        rope_kinds={**ROPE_WITH_YARN, "linear": {},
                    "llama3": {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
        # GQA (4 heads, 2 KV heads), SwiGLU, rope theta 500000 (not the default 10000)
        tiny=(Tiny("llama", "LlamaConfig", dict(intermediate_size=160, num_hidden_layers=2, num_key_value_heads=2,
                                                 rope_parameters=default_rope(5e5))),),
        exercises="GQA, SwiGLU, rotary base"),
    Family(
        "Qwen3", ("Qwen3ForCausalLM",), ("qwen3",), qk_norm=PER_HEAD, config_refusals=(ATTENTION_BIAS,),
        # head_dim 32 != hidden/heads 16, tied input/output embeddings
        tiny=(Tiny("qwen3", "Qwen3Config", dict(tie_word_embeddings=True, intermediate_size=160, num_hidden_layers=2,
                                                 num_key_value_heads=2, head_dim=32,
                                                 rope_parameters=default_rope(1e6))),),
        exercises="qk-norm, head_dim != hidden/heads, tied embeddings"),
    Family(
        "Qwen3-MoE", ("Qwen3MoeForCausalLM",), ("qwen3_moe",), qk_norm=PER_HEAD,
        # Bridge makes every layer an MoE one
        config_refusals=(ATTENTION_BIAS,
                         ConfigRefusal("mlp_only_layers", lambda value: bool(value), "sparse_layer_pattern",
                                       "mlp_only_layers"),
                         ConfigRefusal("decoder_sparse_step", lambda value: value not in (None, 1),
                                       "sparse_layer_pattern", "decoder_sparse_step other than 1")),
        # 4 routed experts, top-2
        tiny=(Tiny("qwen3moe", "Qwen3MoeConfig",
                   dict(intermediate_size=160, num_hidden_layers=2, num_key_value_heads=2, head_dim=32, num_experts=4,
                        num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1, mlp_only_layers=[],
                        norm_topk_prob=True, rope_parameters=default_rope(1e6))),),
        exercises="routed experts (softmax top-k), qk-norm"),
    Family(
        "Qwen2 / Qwen2.5", ("Qwen2ForCausalLM",), ("qwen2",), qkv_bias=True, rope_kinds=ROPE_WITH_YARN,
        # QKV biases randomised by tiny_hf.make (HF's are zeros)
        tiny=(Tiny("qwen2", "Qwen2Config", dict(intermediate_size=160, num_hidden_layers=2, num_key_value_heads=2,
                                                 use_sliding_window=False, rope_parameters=default_rope(1e6))),),
        exercises="biases on the Q, K and V projections, GQA"),
    Family(
        "Mistral", ("MistralForCausalLM",), ("mistral",),
        # a sliding window of 8 tokens (the tests' sequences are 32: it cuts keys off)
        tiny=(Tiny("mistral", "MistralConfig", dict(intermediate_size=160, num_hidden_layers=2, num_key_value_heads=2,
                                                     sliding_window=8, rope_parameters=default_rope(1e6))),),
        exercises="sliding-window attention (window 8 of 32 tokens), GQA"),
    Family(
        "DeepSeek-V3", ("DeepseekV3ForCausalLM",), ("deepseek_v3",), rope_kinds=ROPE_WITH_YARN,
        config_refusals=(TIED, ATTENTION_BIAS, no_shared_experts("n_shared_experts")),
        # As dsv2 (q-LoRA MLA, a shared expert, the first layer dense), with DeepSeek-V3's router:
        # sigmoid scores plus a routing bias (e_score_correction_bias, randomised by tiny_hf.make), the
        # experts picked within the best topk_group of n_group groups, weights renormalised and
        # scaled. HF ranks a group by its best two experts, Megatron by its best top-k/topk_group:
        # 4/2 = 2 here, as in the published config (8/4).
        tiny=(Tiny("dsv3", "DeepseekV3Config",
                   dict(rms_norm_eps=1e-6, intermediate_size=128, num_hidden_layers=3, num_key_value_heads=4,
                        q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                        n_routed_experts=16, num_experts_per_tok=4, moe_intermediate_size=32, n_shared_experts=1,
                        first_k_dense_replace=1, n_group=4, topk_group=2, norm_topk_prob=True,
                        routed_scaling_factor=2.5, rope_parameters=default_rope(3e4))),),
        exercises="MLA, sigmoid routing with a routing bias and expert groups, scaled weights, shared experts"),
    Family(
        "GLM-4.5 (MoE)", ("Glm4MoeForCausalLM",), ("glm4_moe",),
        config_refusals=(TIED, no_shared_experts("n_shared_experts")),
        # partial rotary (half of each head), QKV biases, sigmoid routing with a bias, a shared expert,
        # the first layer dense
        tiny=(Tiny("glm4moe", "Glm4MoeConfig",
                   dict(intermediate_size=128, num_hidden_layers=3, num_key_value_heads=2, head_dim=16,
                        attention_bias=True, use_qk_norm=False, n_routed_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=1, n_group=1,
                        topk_group=1, norm_topk_prob=True, routed_scaling_factor=1.5,
                        rope_parameters=default_rope(1e6, partial_rotary_factor=0.5))),),
        exercises="partial rotary, QKV biases, sigmoid routing with a bias, shared experts (SequentialMLP twins of "
                  "its grouped-expert mappings)"),
    Family(
        "OLMoE", ("OlmoeForCausalLM",), ("olmoe",), qk_norm=FULL_WIDTH, rope_kinds=ROPE_WITH_YARN,
        config_refusals=(TIED, ATTENTION_BIAS),
        # 8 softmax-routed experts (top-2, not renormalised)
        tiny=(Tiny("olmoe", "OlmoeConfig",
                   dict(intermediate_size=32, num_hidden_layers=2, num_key_value_heads=4, num_experts=8,
                        num_experts_per_tok=2, norm_topk_prob=False, eos_token_id=TINY_EOS, pad_token_id=None,
                        bos_token_id=None, rope_parameters=default_rope(1e4))),),
        exercises="q/k norms over all heads at once (split by heads over TP), softmax-routed experts"),
    Family(
        "GPT-OSS", ("GptOssForCausalLM",), ("gpt_oss",), all_biases=True, attention_sinks=True,
        config_refusals=(TIED, ConfigRefusal("attention_bias", lambda value: value is False, "no_attention_bias",
                                             "attention_bias=false")),
        # YaRN with the published values, which Bridge sets whatever config.json says
        rope_kinds={"yarn": {"factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                             "beta_slow": 1.0, "truncate": False, "attention_factor": ABSENT}},
        # sliding-window layers alternating with full ones, YaRN rotary (the published factors:
        # Megatron-Bridge sets them whatever config.json says), 4 clamped-SwiGLU experts with a router
        # bias. Expert width 48 (not 32): Bridge guesses whether to transpose the fused gate_up tensor
        # from its shape, which a square [64, 2 x 32] leaves ambiguous.
        tiny=(Tiny("gptoss", "GptOssConfig",
                   dict(intermediate_size=48, num_hidden_layers=2, num_key_value_heads=2, head_dim=16,
                        num_local_experts=4, num_experts_per_tok=2, sliding_window=8,
                        layer_types=["sliding_attention", "full_attention"], attention_bias=True)),),
        exercises="attention sinks (Megatron's own local attention), sliding-window layers alternating with full "
                  "ones, YaRN rotary, biases everywhere, clamped SwiGLU experts with a router bias (their "
                  "down-projection bias summed once at TP=2+SP: layers/biased_experts.py)"),
    Family(
        "GLM-4.7-Flash", ("Glm4MoeLiteForCausalLM",), ("glm4_moe_lite",),
        # its YaRN rounds the correction range as transformers' does by default; Bridge's MLA mapping drops truncate
        rope_kinds={**DEFAULT_ROPE, "yarn": {**YARN, "truncate": (ABSENT, True)}},
        # Bridge builds first_k_dense_replace leading dense layers, 1 when config.json has none;
        # transformers builds what mlp_layer_types lists
        config_refusals=(TIED, ATTENTION_BIAS, no_shared_experts("n_shared_experts"), SPARSE_AFTER_DENSE,
                         ConfigRefusal(None, first_k_disagrees(absent=1), "dense_layer_count",
                                       "first_k_dense_replace (1 when absent) other than mlp_layer_types' dense "
                                       "layers")),
        # MLA (q-LoRA) with sigmoid routing, a routing bias and a shared expert; its dense/sparse
        # layers listed in mlp_layer_types
        tiny=(Tiny("glm47flash", "Glm4MoeLiteConfig",
                   dict(intermediate_size=128, num_hidden_layers=3, num_key_value_heads=4, q_lora_rank=48,
                        kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=4,
                        num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
                        mlp_layer_types=["dense", "sparse", "sparse"], n_group=1, topk_group=1, norm_topk_prob=True,
                        routed_scaling_factor=1.8, rms_norm_eps=1e-6, rope_parameters=default_rope(1e4))),),
        exercises="MLA with sigmoid routing and a routing bias, shared experts, dense layers listed in "
                  "mlp_layer_types"),
    Family(
        "Hunyuan V3", ("HYV3ForCausalLM",), ("hy_v3",), qk_norm=PER_HEAD, rope_kinds=ROPE_WITH_YARN,
        config_refusals=(ConfigRefusal("first_k_dense_replace", lambda value: value is None, "first_k_dense_replace",
                                       "no first_k_dense_replace"),
                         ConfigRefusal(None, first_k_disagrees(absent=None), "dense_layer_count",
                                       "first_k_dense_replace other than mlp_layer_types' dense layers"),
                         SPARSE_AFTER_DENSE, ATTENTION_BIAS, MLP_BIAS, no_shared_experts("num_shared_experts")),
        # sigmoid routing with a routing bias and scaled weights, a shared expert; first_k_dense_replace
        # written into config.json (Megatron-Bridge 0.6.2 reads it; transformers' config lacks it)
        tiny=(Tiny("hyv3", "HYV3Config",
                   dict(intermediate_size=128, num_hidden_layers=3, num_key_value_heads=2, head_dim=16, num_experts=4,
                        num_experts_per_tok=2, num_shared_experts=1, moe_intermediate_size=32,
                        router_scaling_factor=2.5, mlp_layer_types=["dense", "sparse", "sparse"],
                        first_k_dense_replace=1, rope_parameters=default_rope(1e4))),),
        exercises="qk-norm, sigmoid routing with a routing bias and scaled weights, a shared expert, leading dense "
                  "layers (first_k_dense_replace in config.json)"),
    Family(
        "Gemma", ("GemmaForCausalLM",), ("gemma",), scaled_embedding=True, zero_centered_norms=True,
        config_refusals=(UNTIED, ATTENTION_BIAS),
        # one KV head, head_dim 32
        tiny=(Tiny("gemma", "GemmaConfig", dict(GEMMA, num_hidden_layers=2, num_key_value_heads=1,
                                                 rope_parameters=default_rope(1e4))),),
        exercises="norms with a (1 + weight) gain, embeddings x sqrt(hidden), GeGLU, one KV head, tied embeddings"),
    Family(
        "Gemma 2", ("Gemma2ForCausalLM",), ("gemma2",), sandwich_norms=True, scaled_embedding=True,
        zero_centered_norms=True, config_refusals=(UNTIED, ATTENTION_BIAS),
        # Gemma's layers plus sandwich norms, soft-capped attention and final logits (5, 3), a softmax
        # scale from query_pre_attn_scalar 24, sliding windows (8) on every other layer
        tiny=(Tiny("gemma2", "Gemma2Config",
                   dict(GEMMA, num_hidden_layers=2, num_key_value_heads=2, query_pre_attn_scalar=24, sliding_window=8,
                        attn_logit_softcapping=5.0, final_logit_softcapping=3.0,
                        layer_types=["sliding_attention", "full_attention"], rope_parameters=default_rope(1e4))),),
        exercises="Gemma's layers plus sandwich norms, soft-capped attention scores and final logits, "
                  "query_pre_attn_scalar, sliding windows on every other layer"),
    Family(
        "Gemma 3", ("Gemma3ForCausalLM",), ("gemma3_text",), qk_norm=PER_HEAD, sandwich_norms=True,
        scaled_embedding=True, local_global_rotary=True, zero_centered_norms=True,
        config_refusals=(
            ConfigRefusal("layer_types", lambda value: not follows_five_to_one(value), "layer_pattern",
                          "layer_types other than five sliding layers to one full"),
            ConfigRefusal("use_bidirectional_attention", lambda value: bool(value), "bidirectional_attention",
                          "use_bidirectional_attention=true"),
            UNTIED, ATTENTION_BIAS),
        # Gemma 2's layers without soft caps, plus per-head q/k norms; six layers, five sliding (window
        # 8, rotary base 1e4) then one full (rotary base 1e6, linear scaling x8): transformers' default
        # layer pattern.
        tiny=(Tiny("gemma3", "Gemma3TextConfig",
                   dict(GEMMA, num_hidden_layers=6, num_key_value_heads=2, query_pre_attn_scalar=24, sliding_window=8,
                        rope_parameters={"sliding_attention": default_rope(1e4),
                                         "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}})),),
        exercises="Gemma 2's sandwich norms without soft caps, per-head q/k norms, five sliding-window layers to one "
                  "full one, each kind with its own rotary base (the full one scaled linearly)"),
    Family(
        "DeepSeek-V2", ("DeepseekV2ForCausalLM",), ("deepseek_v2",), rope_kinds=ROPE_WITH_YARN,
        config_refusals=(TIED, ATTENTION_BIAS, MLP_BIAS, no_shared_experts("n_shared_experts")),
        # MLA with q-LoRA, 4 routed + 1 shared expert, first layer dense; dsv2lite: DeepSeek-V2-Lite's
        # layout, MLA without q-LoRA
        tiny=(Tiny("dsv2", "DeepseekV2Config", DSV2),
              Tiny("dsv2lite", "DeepseekV2Config", dict(DSV2, q_lora_rank=None))),
        exercises="multi-latent attention with and without q-LoRA, shared experts, leading dense layers"),
    Family(
        "Nemotron-H", ("NemotronHForCausalLM",), ("nemotron_h",), hybrid=True,
        config_refusals=(TIED, ATTENTION_BIAS, MLP_BIAS),
        tensors=("backbone.embeddings.weight", "backbone.norm_f.weight", "backbone.layers"),
        # transformers 5.12.1's save_pretrained writes the embedding as backbone.embedding.weight (the
        # reverse of its load-time renaming); the published checkpoints and Bridge 0.6.2 say embeddings
        tensor_aliases={"backbone.embeddings.weight": ("backbone.embedding.weight",)},
        # Pattern "ME*-": Mamba2 with 8 heads in 2 groups, MoE with 4 squared-ReLU experts + a shared
        # one and sigmoid routing, attention without positions, a dense MLP; num_layers repeats the
        # pattern. Built with use_mamba_kernels=False (transformers' torch path). That path clamps each
        # step size dt at time_step_min (0.001); its kernel path and Megatron's do not. The tiny
        # model's dt_bias (tiny_hf.make) gives steps of 0.01..0.1 before the input's share, so the clamp
        # never acts and both sides compute the same model. And that path is right for one chunk only:
        # between chunks (transformers 5.12.1) it sums the chunk-to-chunk decays over the wrong axis
        # (measured: 0.1 relative off the sequential recurrence at two chunks), so chunk_size 64 >= the
        # tests' sequences keeps it to one chunk; the kit's multi-chunk scan is held to the recurrence
        # itself (tests/unit/test_mamba_mixer.py).
        tiny=(Tiny("nemotronh", "NemotronHConfig",
                   dict(layer_norm_epsilon=1e-5, layers_block_type=["mamba", "moe", "attention", "mlp"],
                        num_key_value_heads=2, head_dim=16, intermediate_size=96, mlp_hidden_act="relu2",
                        use_mamba_kernels=False, mamba_num_heads=8, mamba_head_dim=16, n_groups=2, ssm_state_size=16,
                        conv_kernel=4, chunk_size=64, n_routed_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=32, moe_shared_expert_intermediate_size=48, n_shared_experts=1,
                        norm_topk_prob=True, routed_scaling_factor=1.0, n_group=1, topk_group=1,
                        num_nextn_predict_layers=0),
                   without=("rms_norm_eps",), pattern_key="layers_block_type"),),
        exercises="Mamba2/attention/MoE hybrid by layer pattern, squared-ReLU experts, sigmoid routing"),
    # Refused: every other text-only causal LM Megatron-Bridge registers, with what the kit lacks for it.
    Family("Qwen3-Next", ("Qwen3NextForCausalLM",), missing=("linear_attention",)),
    Family("Qwen3.5", ("Qwen3_5ForCausalLM",), missing=("linear_attention",)),
    Family("Qwen3.5-MoE", ("Qwen3_5MoeForCausalLM",), missing=("linear_attention",)),
    Family("GLM-5", ("GlmMoeDsaForCausalLM",), missing=("sparse_attention",)),
    Family("DeepSeek-V4", ("DeepseekV4ForCausalLM",), missing=("compressed_attention",)),
    Family("Gemma 4", ("Gemma4ForCausalLM",), missing=("per_layer_attention",)),
    # full-width q/k norms (OLMoE's), partial rotary
    Family("MiniMax-M2", ("MiniMaxM2ForCausalLM",), missing=("unchecked",)),
    Family("EXAONE 4", ("Exaone4ForCausalLM",), missing=("post_norm",)),
    Family("Nemotron (3/4)", ("NemotronForCausalLM",), missing=("layernorm_1p",)),
    Family("Llama-Nemotron (DeciLM)", ("DeciLMForCausalLM",), missing=("heterogeneous_layers", "remote_code")),
    Family("Falcon-H1", ("FalconH1ForCausalLM",), missing=("parallel_hybrid",)),
    Family("Step-3.5", ("Step3p5ForCausalLM",), missing=("remote_code",)),
    Family("Sarvam-MoE", ("SarvamMoEForCausalLM",), missing=("remote_code",)),
    Family("Sarvam-MLA", ("SarvamMLAForCausalLM",), missing=("remote_code",)),
    Family("Ling/Bailing MoE 2", ("BailingMoeV2ForCausalLM",), missing=("remote_code",)),
    Family("Kimi-K2", ("KimiK2ForCausalLM",), missing=("remote_code",)),
    Family("MiMo", ("MiMoForCausalLM",), missing=("remote_code",)),
    Family("MiMo-V2-Flash", ("MiMoV2FlashForCausalLM",),
           missing=("remote_code", "per_layer_attention", "attention_sinks")),
    Family("ERNIE 4.5 (MoE)", ("Ernie4_5_MoeForCausalLM",), missing=("unchecked",)),
    Family("EXAONE MoE", ("ExaoneMoeForCausalLM",), missing=("router_losses",)),
    # the remote-code spelling Bridge registers too
    Family("EXAONE MoE", ("ExaoneMoEForCausalLM",), missing=("remote_code",)),
)

UNLISTED = Family("unlisted", ())  # a model type no record lists: nothing beyond what config.json says
TINY = {t.name: t for f in FAMILIES for t in f.tiny}


def of_model_type(model_type: str | None) -> Family:
    """The family whose config.json says this model_type; UNLISTED for any other."""
    return next((f for f in FAMILIES if model_type in f.model_types), UNLISTED)


def of_architectures(architectures: Iterable[str]) -> Family:
    """The family of the first listed architecture the kit builds; UNLISTED when none is."""
    for a in architectures:
        for f in FAMILIES:
            if f.supported and a in f.architectures:
                return f
    return UNLISTED
