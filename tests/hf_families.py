"""How the tests check each supported Hugging Face family of helpers/job/families.py: the layouts at
which tests/jobs/test_hf_import.py holds each tiny model's logits and gradients to transformers', the
layout it trains 5 iterations at against one process, and the family's row of docs/architectures.md
(those layouts in words and the tests that check them).

docs/architectures.md is the table `python -m helpers --list-architectures` prints, with two columns
added from here: where each row's logits are checked and by which test. Regenerate it with

    python -m tests.hf_families > docs/architectures.md

(tests/unit/test_architectures.py keeps the page equal to `docs_page()`)."""
from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field

from helpers.job import architectures

HF_IMPORT_TEST = "tests/jobs/test_hf_import.py::test_logits_equal_transformers_and_export_is_bit_identical"
TRAIN_TEST = "tests/jobs/test_hf_import.py::test_family_trains_at_its_layout_like_one_process"
REFUSAL_TEST = "tests/unit/test_architectures.py::test_refused_before_start"

# Layouts (JobSpec sizes) a tiny model is checked at, on the tests' two processes.
ONE = {}  # TP=1 (DP=2)
TP2 = dict(tp=2)
PP2 = dict(pp=2)
TP2_SP = dict(tp=2, sp=True)
EP2 = dict(ep=2)
CP2 = dict(cp=2)
TP2_SP_EP2 = dict(tp=2, sp=True, ep=2, etp=1)
TP2_SP_ETP1 = dict(tp=2, sp=True, etp=1)  # biased experts: Megatron builds them at expert TP 1 only
DENSE = (ONE, TP2, PP2, TP2_SP)
MOE = (ONE, TP2_SP, EP2, TP2_SP_EP2)  # MoE with TP needs SP


@dataclass(frozen=True)
class Checked:
    """How one supported family is checked."""
    # tiny model (families.Tiny.name) -> the layouts whose logits test_hf_import.py holds to transformers'
    # (none: its layouts are checked in another test, its gradients at TP=1 there)
    parity: dict[str, tuple[dict, ...]]
    layouts: str  # those layouts, and the training ones, in the words of its row
    tests: str  # where, for its row: test file::function[ids], comma-separated
    # tiny model -> the layout it trains 5 iterations at there, against one process. Gradients at every
    # parity layout already equal transformers'; training adds the optimizer step and what happens
    # between iterations, so a family trains where that differs: a layout no parity job has (CP), the
    # routing bias updated after each step (DeepSeek-V3, as in GLM and Hunyuan), experts at expert-TP 1
    # with their own biases (GPT-OSS), tied embeddings across pipeline stages (Gemma 3, as in Gemma)
    trained: dict[str, dict] = field(default_factory=dict)


CHECKED = {
    "Llama": Checked({"llama": DENSE}, "TP=1, TP=2, PP=2, TP=2+SP", HF_IMPORT_TEST + "[llama-*]"),
    "Qwen3": Checked({"qwen3": DENSE}, "TP=1, TP=2, PP=2, TP=2+SP", HF_IMPORT_TEST + "[qwen3-*]"),
    "Qwen3-MoE": Checked({"qwen3moe": MOE + (PP2,)}, "TP=1, TP=2+SP, EP=2, TP=2+SP+EP=2, PP=2",
                         HF_IMPORT_TEST + "[qwen3moe-*]"),
    "Qwen2 / Qwen2.5": Checked({"qwen2": (ONE, TP2)}, "TP=1, TP=2", HF_IMPORT_TEST + "[qwen2-*]"),
    # trained at CP=2, where the sliding window crosses the load-balanced chunks (no parity layout has CP)
    "Mistral": Checked({"mistral": (ONE, TP2_SP)}, "TP=1, TP=2+SP; 5 iterations at CP=2 = one process",
                       HF_IMPORT_TEST + "[mistral-*], " + TRAIN_TEST + "[mistral]", {"mistral": CP2}),
    "DeepSeek-V3": Checked({"dsv3": (ONE, EP2)}, "TP=1, EP=2; 5 iterations at EP=2 = one process",
                           HF_IMPORT_TEST + "[dsv3-*], " + TRAIN_TEST + "[dsv3]", {"dsv3": EP2}),
    "GLM-4.5 (MoE)": Checked({"glm4moe": (ONE, EP2)}, "TP=1, EP=2", HF_IMPORT_TEST + "[glm4moe-*]"),
    "OLMoE": Checked({"olmoe": MOE[:3]}, "TP=1, TP=2+SP, EP=2", HF_IMPORT_TEST + "[olmoe-*]"),
    "GPT-OSS": Checked({"gptoss": (ONE, TP2_SP_ETP1, EP2)},
                       "TP=1, TP=2+SP, EP=2; 5 iterations at TP=2+SP = one process",
                       HF_IMPORT_TEST + "[gptoss-*], " + TRAIN_TEST + "[gptoss]", {"gptoss": TP2_SP_ETP1}),
    "GLM-4.7-Flash": Checked({"glm47flash": (ONE, EP2)}, "TP=1, EP=2", HF_IMPORT_TEST + "[glm47flash-*]"),
    "Hunyuan V3": Checked({"hyv3": (ONE, EP2)}, "TP=1, EP=2", HF_IMPORT_TEST + "[hyv3-*]"),
    "Gemma": Checked({"gemma": DENSE[:3]}, "TP=1, TP=2, PP=2", HF_IMPORT_TEST + "[gemma-*]"),
    "Gemma 2": Checked({"gemma2": (ONE, TP2_SP, PP2)},
                       "TP=1, TP=2+SP, PP=2 (CP refused: the soft-capped attention is built for cp=1)",
                       HF_IMPORT_TEST + "[gemma2-*]"),
    # trained at PP=2 (the layer numbering across stages) and, in its own test, at CP=2
    "Gemma 3": Checked({"gemma3": (ONE, TP2_SP, PP2)},
                       "TP=1, TP=2+SP, PP=2; 5 iterations at PP=2 and at CP=2 = one process",
                       HF_IMPORT_TEST + "[gemma3-*], " + TRAIN_TEST + "[gemma3], "
                       "tests/jobs/test_hf_import.py::test_gemma3_trains_at_cp2_like_one_process", {"gemma3": PP2}),
    # dsv2lite: MLA without q-LoRA
    "DeepSeek-V2": Checked({"dsv2": MOE + (dict(pp=2, first_stage_layers=2, last_stage_layers=1),),
                            "dsv2lite": MOE[:3]},
                           "TP=1, TP=2+SP, EP=2, TP=2+SP+EP=2, PP=2", HF_IMPORT_TEST + "[dsv2*]"),
    # its layouts: tests/jobs/test_hybrid.py
    "Nemotron-H": Checked({}, "TP=1, TP=2+SP, PP=2, EP=2, CP=2",
                          "tests/jobs/test_hybrid.py::test_logits_equal_transformers_and_export_is_bit_identical"),
}
PARITY = {name: layouts for c in CHECKED.values() for name, layouts in c.parity.items()}
TRAINED = {name: layout for c in CHECKED.values() for name, layout in c.trained.items()}


def row_checks(row: architectures.Row) -> tuple[str, str]:
    """(checked at, checked by) of one row of the architecture table."""
    if row.outcome == "supported":
        checked = CHECKED[row.family]
        return checked.layouts, checked.tests
    return "before start", f"{REFUSAL_TEST}[{row.architecture}]"


def docs_page() -> str:
    """docs/architectures.md: the table `python -m helpers --list-architectures` prints, each row with
    where its logits are checked and by which test."""
    version = importlib.metadata.version(architectures.BRIDGE)
    rows = architectures.table()
    supported = sum(r.outcome == "supported" for r in rows)
    lines = [
        "# Hugging Face architectures",
        "",
        f"Every text-only causal-LM architecture Megatron-Bridge {version} registers, and what the kit does "
        f"with it: {supported} supported, {len(rows) - supported} refused before start with the missing piece "
        "named: the table `python -m helpers --list-architectures` prints (from Bridge's registry, "
        "`helpers/job/families.py` and `helpers/job/architectures.py`), with two columns added from "
        "`tests/hf_families.py`: the layouts at which each supported family's logits equal transformers', and "
        "the tests that check each row. Generated by `python -m tests.hf_families > docs/architectures.md`; a unit "
        "test keeps this page equal to it.",
        "",
        "For a supported family, every parameter's gradient after one backward also equals transformers' in each "
        "layout listed (`test_gradients_equal_transformers`), and each config variant of its tiny model (one "
        "config.json choice changed: embeddings tied or not, KV heads, biases, q-LoRA, leading dense layers, shared "
        "experts, rotary scaling kinds; `tests/jobs/hf_variants.py`) either equals transformers or is refused "
        "before start by the rule its row names (`test_config_variants_are_refused_by_name_or_equal_transformers`, "
        "both in `tests/jobs/test_hf_import.py`).",
        "",
        "| " + " | ".join(architectures.COLUMNS + ("checked at", "checked by")) + " |",
        "|" + "---|" * (len(architectures.COLUMNS) + 2),
    ]
    for r in rows:
        at, by = row_checks(r)
        lines.append("| " + " | ".join(architectures.cells(r) + (at, ", ".join(f"`{t}`" for t in by.split(", "))))
                     + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(docs_page(), end="")
