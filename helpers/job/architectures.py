"""Every text-only causal-LM architecture Megatron-Bridge registers, and what the kit does with it:
supported (built on the kit's local backend and checked against transformers) or refused before
start with the piece that is missing named. No third outcome.

The list of architectures is read from the installed Megatron-Bridge itself: every
`register_bridge(source=...)` or `register_bridge_implementation(source=...)` in its sources,
parsed with `ast` (no import: Bridge's full import takes ~9 s and needs the TE stand-in). tests/unit/test_hf_model.py
checks that this equals Bridge's live registry (`AutoBridge.list_supported_models()`), that every
text-only architecture found has exactly one outcome here, and that docs/architectures.md is
`markdown()`. `python -m helpers --list-architectures` prints the same table."""
from __future__ import annotations

import ast
import functools
import importlib.metadata
from dataclasses import dataclass

BRIDGE = "megatron-bridge"
SOURCES = "megatron/bridge/"
REGISTER = ("register_bridge", "register_bridge_implementation")
TE_FIX = ("convert it with Megatron-Bridge on Transformer Engine instead (AutoBridge.from_hf_pretrained(folder)"
          ".to_megatron_provider() with its default layer spec, on a GPU machine)")


@dataclass(frozen=True)
class Registration:
    """One `register_bridge` of Megatron-Bridge: HF architecture -> Megatron model class."""
    architecture: str
    target: str
    module: str  # the module whose import registers it

    @property
    def text_causal_lm(self) -> bool:
        """Text-only causal LM: `...ForCausalLM` (vision/audio/omni models are `...ForConditionalGeneration`)."""
        return self.architecture.endswith("ForCausalLM")


@dataclass(frozen=True)
class Supported:
    family: str
    exercises: str  # what the tiny model exercises in the kit's builder
    layouts: str  # the layouts its logits are checked at
    test: str  # where: test file (::function)


@dataclass(frozen=True)
class Piece:
    """A refusal reason: what the kit's local backend lacks (or cannot check) for an architecture."""
    name: str  # the violation is named hf_missing_<name>
    what: str  # what is missing, a noun phrase (the table's "missing" column)
    fix: str
    sentence: str = "{} (no local-backend module here)"  # what the refusal says is missing

    def message(self) -> str:
        return self.sentence.format(self.what)


@dataclass(frozen=True)
class Refused:
    family: str
    pieces: tuple[str, ...]  # Piece names


PIECES = {p.name: p for p in (
    Piece("linear_attention", "gated delta-net (linear attention) layers", TE_FIX),
    Piece("sparse_attention", "DeepSeek sparse attention (a lightning indexer picks the keys each query sees)",
          TE_FIX),
    Piece("compressed_attention", "compressed sparse attention, hash-routed experts and hyper-connections "
          "(Megatron-Core's experimental DeepSeek-V4 modules)", TE_FIX),
    Piece("per_layer_attention", "attention that changes shape by layer (its own head size or KV heads "
          "in the sliding-window layers)", TE_FIX),
    Piece("attention_sinks", "attention sinks (a learned softmax offset per head), clamped SwiGLU experts", TE_FIX),
    Piece("post_norm", "post-norm layers (norms after attention and the MLP, none before)", TE_FIX),
    Piece("layernorm_1p", "LayerNorm with a (1 + weight) gain, partial rotary embeddings", TE_FIX),
    Piece("heterogeneous_layers", "layers of different shapes (per-layer heads and MLP widths, skipped blocks)",
          TE_FIX),
    Piece("parallel_hybrid", "attention and Mamba in parallel inside one layer, muP multipliers", TE_FIX),
    Piece("remote_code", "a transformers class: transformers 5.12.1 has none (the checkpoint ships remote code), "
          "so its logits cannot be checked offline",
          "convert it with Megatron-Bridge directly (it runs the checkpoint's own code)",
          "{}"),
    Piece("unchecked", "a parity check: this combination of layers has not been held to transformers' logits "
          "on the kit's builder",
          "add a tiny random model of it to helpers/launch/tiny_hf.py and its layouts to the parity job "
          "(tests/jobs/test_hf_import.py), then list it as supported in helpers/job/architectures.py",
          "{}"),
    Piece("router_losses", "training that matches one process: a tiny model whose logits match transformers' at "
          "TP=1 and EP=2 gave other losses at EP=2 than in one process from the second iteration on (4e-5), "
          "not yet explained; what it adds to the supported MoE families is its router as Megatron-Bridge sets "
          "it (global aux loss, z-loss, routing-bias updates)",
          "check it on one process first, or convert it with Megatron-Bridge on Transformer Engine", "{}"),
    Piece("first_k_dense_replace", "first_k_dense_replace in config.json: Megatron-Bridge 0.6.2's Hunyuan V3 "
          "bridge reads it, and transformers 5.12.1's HYV3Config does not write it (it lists mlp_layer_types)",
          "add \"first_k_dense_replace\": N to config.json, N = the number of leading \"dense\" entries of "
          "mlp_layer_types", "{}"),
    Piece("layer_pattern", "layer_types other than five sliding-window layers to one full one: Megatron-Bridge "
          "0.6.2 builds Gemma 3 with that pattern whatever config.json says",
          "convert it with a Megatron-Bridge whose Gemma 3 provider reads layer_types, or give the model "
          "Gemma 3's own pattern", "{}"),
    Piece("bidirectional_attention", "causal attention: use_bidirectional_attention=true (an embedding model) "
          "is not a causal LM", "train it with a bidirectional-attention setup, not as a causal LM", "{}"),
    Piece("multi_token_prediction", "multi-token prediction layers (num_nextn_predict_layers > 0)",
          "set num_nextn_predict_layers to 0 in config.json: the main model then trains alone (transformers "
          "ignores those layers too)"),
)}

REFUSAL_TEST = "tests/unit/test_architectures.py::test_refused_before_start"
TRAIN_TEST = "tests/jobs/test_hf_import.py::test_family_trains_at_its_layout_like_one_process"
HF_IMPORT_TEST = "tests/jobs/test_hf_import.py::test_logits_equal_transformers_and_export_is_bit_identical"
SUPPORTED = {
    "LlamaForCausalLM": Supported("Llama", "GQA, SwiGLU, rotary base", "TP=1, TP=2, PP=2, TP=2+SP",
                                  HF_IMPORT_TEST + "[llama-*]"),
    "Qwen3ForCausalLM": Supported("Qwen3", "qk-norm, head_dim != hidden/heads, tied embeddings",
                                  "TP=1, TP=2, PP=2, TP=2+SP", HF_IMPORT_TEST + "[qwen3-*]"),
    "Qwen3MoeForCausalLM": Supported("Qwen3-MoE", "routed experts (softmax top-k), qk-norm",
                                     "TP=1, TP=2+SP, EP=2, TP=2+SP+EP=2, PP=2", HF_IMPORT_TEST + "[qwen3moe-*]"),
    "Qwen2ForCausalLM": Supported("Qwen2 / Qwen2.5", "biases on the Q, K and V projections, GQA",
                                  "TP=1, TP=2; 5 iterations at TP=2 = one process",
                                  HF_IMPORT_TEST + "[qwen2-*], " + TRAIN_TEST + "[qwen2]"),
    "MistralForCausalLM": Supported("Mistral", "sliding-window attention (window 8 of 32 tokens), GQA",
                                    "TP=1, TP=2+SP; 5 iterations at CP=2 = one process",
                                    HF_IMPORT_TEST + "[mistral-*], " + TRAIN_TEST + "[mistral]"),
    "DeepseekV3ForCausalLM": Supported("DeepSeek-V3", "MLA, sigmoid routing with a routing bias and expert "
                                       "groups, scaled weights, shared experts",
                                       "TP=1, EP=2; 5 iterations at EP=2 = one process",
                                       HF_IMPORT_TEST + "[dsv3-*], " + TRAIN_TEST + "[dsv3]"),
    "Glm4MoeForCausalLM": Supported("GLM-4.5 (MoE)", "partial rotary, QKV biases, sigmoid routing with a bias, "
                                    "shared experts (SequentialMLP twins of its grouped-expert mappings)",
                                    "TP=1, EP=2; 5 iterations at EP=2 = one process",
                                    HF_IMPORT_TEST + "[glm4moe-*], " + TRAIN_TEST + "[glm4moe]"),
    "OlmoeForCausalLM": Supported("OLMoE", "q/k norms over all heads at once (split by heads over TP), "
                                  "softmax-routed experts",
                                  "TP=1, TP=2+SP, EP=2; 5 iterations at TP=2+SP = one process",
                                  HF_IMPORT_TEST + "[olmoe-*], " + TRAIN_TEST + "[olmoe]"),
    "GptOssForCausalLM": Supported("GPT-OSS", "attention sinks (Megatron's own local attention), sliding-window "
                                   "layers alternating with full ones, YaRN rotary, biases everywhere, clamped "
                                   "SwiGLU experts with a router bias",
                                   "TP=1, TP=2+SP, EP=2; 5 iterations at EP=2 = one process (training at TP>1 is "
                                   "refused: its gradients do not match yet)",
                                   HF_IMPORT_TEST + "[gptoss-*], " + TRAIN_TEST + "[gptoss]"),
    "Glm4MoeLiteForCausalLM": Supported("GLM-4.7-Flash", "MLA with sigmoid routing and a routing bias, shared "
                                        "experts, dense layers listed in mlp_layer_types",
                                        "TP=1, EP=2; 5 iterations at EP=2 = one process",
                                        HF_IMPORT_TEST + "[glm47flash-*], " + TRAIN_TEST + "[glm47flash]"),
    "HYV3ForCausalLM": Supported("Hunyuan V3", "qk-norm, sigmoid routing with a routing bias and scaled weights, "
                                 "a shared expert, leading dense layers (first_k_dense_replace in config.json)",
                                 "TP=1, EP=2; 5 iterations at EP=2 = one process",
                                 HF_IMPORT_TEST + "[hyv3-*], " + TRAIN_TEST + "[hyv3]"),
    "GemmaForCausalLM": Supported("Gemma", "norms with a (1 + weight) gain, embeddings x sqrt(hidden), GeGLU, one "
                                  "KV head, tied embeddings", "TP=1, TP=2, PP=2; 5 iterations at PP=2 = one process",
                                  HF_IMPORT_TEST + "[gemma-*], " + TRAIN_TEST + "[gemma]"),
    "Gemma2ForCausalLM": Supported("Gemma 2", "Gemma's layers plus sandwich norms, soft-capped attention scores and "
                                   "final logits, query_pre_attn_scalar, sliding windows on every other layer",
                                   "TP=1, TP=2+SP, PP=2; 5 iterations at TP=2+SP = one process (CP refused: the "
                                   "soft-capped attention is built for cp=1)",
                                   HF_IMPORT_TEST + "[gemma2-*], " + TRAIN_TEST + "[gemma2]"),
    "Gemma3ForCausalLM": Supported("Gemma 3", "Gemma 2's sandwich norms without soft caps, per-head q/k norms, "
                                   "five sliding-window layers to one full one, each kind with its own rotary base "
                                   "(the full one scaled linearly)",
                                   "TP=1, TP=2+SP, PP=2; 5 iterations at PP=2 and at CP=2 = one process",
                                   HF_IMPORT_TEST + "[gemma3-*], " + TRAIN_TEST + "[gemma3], "
                                   "tests/jobs/test_hf_import.py::test_gemma3_trains_at_cp2_like_one_process"),
    "DeepseekV2ForCausalLM": Supported("DeepSeek-V2", "multi-latent attention with and without q-LoRA, shared "
                                       "experts, leading dense layers", "TP=1, TP=2+SP, EP=2, TP=2+SP+EP=2, PP=2",
                                       HF_IMPORT_TEST + "[dsv2*]"),
    "NemotronHForCausalLM": Supported("Nemotron-H", "Mamba2/attention/MoE hybrid by layer pattern, squared-ReLU "
                                      "experts, sigmoid routing", "TP=1, TP=2+SP, PP=2, EP=2, CP=2",
                                      "tests/jobs/test_hybrid.py::test_logits_equal_transformers_and_export_is_"
                                      "bit_identical"),
}
REFUSED = {
    "Qwen3NextForCausalLM": Refused("Qwen3-Next", ("linear_attention",)),
    "Qwen3_5ForCausalLM": Refused("Qwen3.5", ("linear_attention",)),
    "Qwen3_5MoeForCausalLM": Refused("Qwen3.5-MoE", ("linear_attention",)),
    "GlmMoeDsaForCausalLM": Refused("GLM-5", ("sparse_attention",)),
    "DeepseekV4ForCausalLM": Refused("DeepSeek-V4", ("compressed_attention",)),
    "Gemma4ForCausalLM": Refused("Gemma 4", ("per_layer_attention",)),
    "MiniMaxM2ForCausalLM": Refused("MiniMax-M2", ("unchecked",)),  # full-width q/k norms (OLMoE's), partial rotary
    "Exaone4ForCausalLM": Refused("EXAONE 4", ("post_norm",)),
    "NemotronForCausalLM": Refused("Nemotron (3/4)", ("layernorm_1p",)),
    "DeciLMForCausalLM": Refused("Llama-Nemotron (DeciLM)", ("heterogeneous_layers", "remote_code")),
    "FalconH1ForCausalLM": Refused("Falcon-H1", ("parallel_hybrid",)),
    "Step3p5ForCausalLM": Refused("Step-3.5", ("remote_code",)),
    "SarvamMoEForCausalLM": Refused("Sarvam-MoE", ("remote_code",)),
    "SarvamMLAForCausalLM": Refused("Sarvam-MLA", ("remote_code",)),
    "BailingMoeV2ForCausalLM": Refused("Ling/Bailing MoE 2", ("remote_code",)),
    "KimiK2ForCausalLM": Refused("Kimi-K2", ("remote_code",)),
    "MiMoForCausalLM": Refused("MiMo", ("remote_code",)),
    "MiMoV2FlashForCausalLM": Refused("MiMo-V2-Flash", ("remote_code", "per_layer_attention", "attention_sinks")),
    "Ernie4_5_MoeForCausalLM": Refused("ERNIE 4.5 (MoE)", ("unchecked",)),
    "ExaoneMoeForCausalLM": Refused("EXAONE MoE", ("router_losses",)),
    "ExaoneMoEForCausalLM": Refused("EXAONE MoE", ("remote_code",)),  # the remote-code spelling Bridge registers too
}


def follows_five_to_one(layer_types: list[str] | None) -> bool:
    """Gemma 3's layer_types as Megatron-Bridge builds them (interleaved_attn_pattern (5, 1), fixed
    in its provider): every sixth layer full, the others sliding. Absent: transformers' default, the same."""
    return layer_types is None or layer_types == [
        "full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(len(layer_types))]


# Refusals that depend on the config of a supported architecture: (architectures or None for
# all, config key, applies to its value, piece).
CONFIG_REFUSALS = (
    (None, "num_nextn_predict_layers", lambda value: bool(value), "multi_token_prediction"),
    (("Gemma3ForCausalLM",), "layer_types", lambda value: not follows_five_to_one(value), "layer_pattern"),
    (("Gemma3ForCausalLM",), "use_bidirectional_attention", lambda value: bool(value), "bidirectional_attention"),
    (("HYV3ForCausalLM",), "first_k_dense_replace", lambda value: value is None, "first_k_dense_replace"),
)


def _source_name(node: ast.expr, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):  # a class imported from transformers, or a module-level string constant
        return constants.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


@functools.lru_cache(maxsize=1)
def bridge_registrations() -> tuple[Registration, ...]:
    """Every `register_bridge(source=..., target=...)` in the installed Megatron-Bridge's model
    sources (read, not imported)."""
    dist = importlib.metadata.distribution(BRIDGE)
    found = []
    for file in dist.files or ():
        name = str(file)
        if not (name.startswith(SOURCES) and name.endswith(".py")):
            continue
        text = dist.locate_file(file).read_text()
        if "register_bridge" not in text:
            continue
        tree = ast.parse(text)
        constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                     and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                     for t in n.targets if isinstance(t, ast.Name)}
        module = name[:-3].replace("/", ".")
        for node in ast.walk(tree):
            called = node.func.attr if isinstance(getattr(node, "func", None), ast.Attribute) else \
                getattr(getattr(node, "func", None), "id", None)
            if not (isinstance(node, ast.Call) and called in REGISTER):
                continue
            kw = {k.arg: k.value for k in node.keywords}
            source = _source_name(kw["source"], constants) if "source" in kw else None
            if source and source[0].isupper():  # not the registry's own `source` argument, passed on
                found.append(Registration(source, _source_name(kw.get("target"), {}) or "?", module))
    return tuple(sorted(set(found), key=lambda r: r.architecture))


def text_architectures() -> dict[str, Registration]:
    """Bridge's text-only causal-LM registrations, by architecture."""
    return {r.architecture: r for r in bridge_registrations() if r.text_causal_lm}


def bridge_module(architecture: str) -> str | None:
    """The Bridge module whose import registers `architecture` (helpers/runtime/hf/bridge_import.py)."""
    for r in bridge_registrations():
        if r.architecture == architecture:
            return r.module
    return None


def refusal(architecture: str, config: dict | None = None) -> list[Piece]:
    """Why the kit refuses a Bridge-registered architecture (with this config.json): [] = supported."""
    if architecture in REFUSED:
        return [PIECES[p] for p in REFUSED[architecture].pieces]
    if architecture not in SUPPORTED:
        return [PIECES["unchecked"]]  # registered by a newer Bridge than this table knows
    return [PIECES[piece] for archs, key, applies, piece in CONFIG_REFUSALS
            if (archs is None or architecture in archs) and applies((config or {}).get(key))]


@dataclass(frozen=True)
class Row:
    architecture: str
    family: str
    outcome: str  # "supported" | "refused"
    detail: str  # what is exercised / what is missing
    test: str


def table() -> list[Row]:
    """One row per text-only causal-LM architecture of the installed Bridge: supported first."""
    rows = []
    for arch in text_architectures():
        if arch in SUPPORTED:
            s = SUPPORTED[arch]
            rows.append(Row(arch, s.family, "supported", f"{s.exercises}; logits = transformers' at {s.layouts}",
                            s.test))
        else:
            pieces = refusal(arch)
            family = REFUSED[arch].family if arch in REFUSED else "?"
            rows.append(Row(arch, family, "refused", "missing " + "; ".join(p.what for p in pieces),
                            f"{REFUSAL_TEST}[{arch}]"))
    return sorted(rows, key=lambda r: (r.outcome != "supported", r.family.lower()))


def markdown() -> str:
    """docs/architectures.md, and what `python -m helpers --list-architectures` prints."""
    version = importlib.metadata.version(BRIDGE)
    rows = table()
    supported = sum(r.outcome == "supported" for r in rows)
    lines = [
        "# Hugging Face architectures",
        "",
        f"Every text-only causal-LM architecture Megatron-Bridge {version} registers, and what the kit does "
        f"with it: {supported} supported, {len(rows) - supported} refused before start with the missing piece "
        "named. Generated by `python -m helpers --list-architectures` from Bridge's registry and "
        "`helpers/job/architectures.py`; a unit test keeps this page equal to it.",
        "",
        "| architecture | family | outcome | exercised / missing | checked by |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| `{r.architecture}` | {r.family} | {r.outcome} | {r.detail} | "
              + ", ".join(f"`{t}`" for t in r.test.split(", ")) + " |" for r in rows]
    return "\n".join(lines) + "\n"
