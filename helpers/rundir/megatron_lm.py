"""megatron-lm.sh: a run as the command a user runs on a GPU cluster with Megatron-LM's
`pretrain_gpt.py` under torchrun: the same model, layout, batch, schedule, optimizer, data,
tokenizer, iterations and checkpoints, in bf16 on Transformer Engine's modules (what GPU users run).
Every flag comes from helpers/rundir/megatron_flags.py, which asks Megatron-LM's own parser; the
comment lines at the top say where the kit's CPU job differed (its substitutes for Transformer
Engine modules, fp32, a tokenizer Megatron-LM has no type for). Rank 0 writes it next to
megatron.json (helpers/runtime/measure/megatron_calls.py); megatron_lm_check.py runs Megatron-LM's
parse_args + validate_args on it.

    text = script(run.megatron, run.spec, run.path)    # the file's contents
    args = arguments(run.path / names.MEGATRON_LM_SCRIPT)  # pretrain_gpt.py's arguments, as a list"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

from helpers.job import megatron_names
from helpers.rundir import megatron_flags, names

ENTRY = {"HybridModel": "pretrain_hybrid.py"}  # Megatron-LM's entry script per model class; else pretrain_gpt.py
CHECKPOINT_FROM_HF = "hf-import"  # the run directory's folder for Bridge's import of an HF model's weights
PAD_CHOICES = (128, 64, 32, 16, 8, 4, 2, 1)  # Megatron-LM's --make-vocab-size-divisible-by, its default first


def entry_script(calls: dict) -> str:
    model_class = (calls.get("model") or [{}])[0].get("class", "GPTModel").rsplit(".", 1)[-1]
    return ENTRY.get(model_class, "pretrain_gpt.py")


def model_vocab(calls: dict) -> int:
    return calls["model"][0]["vocab_size"]


def vocab_divisor(vocab: int, tokenizer_vocab: int, tp: int) -> int | None:
    """The --make-vocab-size-divisible-by that makes Megatron-LM pad the tokenizer's vocabulary to
    exactly the model's (it pads to a multiple of divisor x TP); None when no divisor does."""
    for d in PAD_CHOICES:
        multiple = d * tp
        if vocab % multiple == 0 and 0 <= vocab - tokenizer_vocab < multiple:
            return d
    return None


def tokenizer_arguments(calls: dict, spec) -> tuple[dict, int, list[str]]:
    """Tokenizer arguments (Megatron-LM's names, which Bridge's TokenizerConfig shares), the
    vocabulary the tokenizer will report, and comment lines."""
    data, vocab = calls.get("data") or {"kind": "synthetic"}, model_vocab(calls)
    tok = data.get("tokenizer") or {}
    null = ({"tokenizer_type": "NullTokenizer", "vocab_size": vocab - 1}, vocab)  # NullTokenizer adds end-of-document
    if data["kind"] == "synthetic" and spec.hf_model and spec.tokenizer == "hf":  # the model's own, as the kit's
        return {"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": spec.hf_model}, vocab, []
    if data["kind"] == "synthetic":
        return (*null, [])
    name = tok.get("name")
    if name == "hf":
        return {"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": tok["folder"]}, tok["vocab_size"], []
    if name == "gpt2":
        return ({"tokenizer_type": "GPT2BPETokenizer", "vocab_file": tok["files"]["vocab.json"],
                 "merge_file": tok["files"]["merges.txt"]}, tok["vocab_size"], [])
    if name == "qwen3":
        return ({"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": str(Path(tok["files"]["tokenizer.json"]).parent)},
                tok["vocab_size"], [])
    return (*null, [f"tokenizer: the kit's {name} tokenizer has no Megatron-LM type; the data is tokenized already, "
                    f"and NullTokenizer over the model's {vocab} ids reads the same token ids"])


def _data(calls: dict, spec) -> tuple[dict, list[str]]:
    data = calls.get("data") or {"kind": "synthetic"}
    if data["kind"] == "synthetic":
        return {"mock_data": True}, ["data: the kit's synthetic tokens; Megatron-LM's mock dataset here (--mock-data)"]
    prefixes, notes = data["prefixes"], []
    if data["kind"] == "chat":
        notes.append("data: the kit trained SFT (its SFTDataset: one conversation per sequence, loss on the answers); "
                     "here the same tokenized conversations train as packed text (loss on every token)")
    if "all" in prefixes:
        return {"data_path": prefixes["all"], megatron_names.lm_name("data_split"): data.get("split") or spec.data_split}, notes
    return {"train_data_path": prefixes["train"], "valid_data_path": prefixes["valid"],
            "test_data_path": prefixes["test"]}, notes


def _precision(calls: dict, spec) -> tuple[dict, list[str]]:
    out, notes = {"bf16": True}, []
    if spec.grad_reduce_dtype == "bf16":  # else validate_args accumulates and reduces bf16 gradients in fp32
        out["grad_reduce_in_bf16"] = True
    if not spec.bf16:
        notes.append(f"precision: the kit's job computed in {spec.precision}; on GPUs this command trains in bf16")
    if spec.precision == "fp8":
        recipe = spec.fp8_recipe
        if recipe not in megatron_flags.choices("fp8_recipe"):
            notes.append(f"fp8: Megatron-LM has no {recipe} recipe; Transformer Engine's tensorwise recipe here")
            recipe = "tensorwise"
        out.update({"fp8": "hybrid", megatron_names.lm_name("fp8_recipe"): recipe})
        if spec.backend != "te":
            notes.append("fp8: the kit's job ran its own FP8 linears (helpers/runtime/layers/fp8_linear.py); "
                         "Transformer Engine's FP8 here")
    return out, notes


def _iterations(calls: dict, spec) -> dict:
    real = (calls.get("data") or {}).get("kind", "synthetic") != "synthetic"
    out = megatron_names.lm_values(spec, ("iters", "log_interval", "eval_iters", "eval_interval"))
    if not real:
        out[megatron_names.lm_name("eval_iters")] = 0  # the kit validates real data only
    if spec.eval_only:
        out.update(megatron_names.lm_values(spec, ("eval_only",)))
    if spec.lr_decay != "constant":
        out.update(megatron_names.lm_values(spec, ("lr_decay_iters",)))
    return out


def _checkpoints(spec, run_dir: Path) -> tuple[dict, list[str], list[str]]:
    """Checkpoint arguments, comment lines, and shell lines to run before torchrun."""
    out, notes, before = {}, [], []
    if spec.save_interval:  # a folder of its own: run beside the kit's job, it must not overwrite the kit's checkpoints
        out[megatron_names.lm_name("save_dir")] = str(Path(run_dir) / names.MEGATRON_LM_CHECKPOINTS)
        out.update(megatron_names.lm_values(spec, ("save_interval",)))
    loads = spec.load_dirs()
    if loads:
        out.update(megatron_names.lm_values(spec, ("load_dir", "load_optimizer")))  # the first; --no-load-optim
        if len(loads) > 1:
            notes.append(f"load: the kit evaluated {len(loads)} checkpoints; one command per checkpoint here "
                         f"(--load), this one the first")
    if spec.hf_model:
        imported = str(Path(run_dir) / CHECKPOINT_FROM_HF)
        out["pretrained_checkpoint"] = imported
        notes.append(f"weights: the kit's job started from the Hugging Face folder {spec.hf_model} (imported by "
                     f"Megatron-Bridge); Megatron-LM starts from Bridge's Megatron checkpoint of it, written once below")
        before.append(f"[ -d {shlex.quote(imported)} ] || python -c "
                      + shlex.quote(f"from megatron.bridge import AutoBridge; "
                                    f"AutoBridge.import_ckpt({spec.hf_model!r}, {imported!r})"))
    if spec.export_hf:
        notes.append(f"export: the kit wrote the trained model to {spec.export_hf} as Hugging Face; with Megatron-LM "
                     "use Bridge's AutoBridge.export_ckpt on the saved checkpoint")
    return out, notes, before


def substitutes(calls: dict) -> list[str]:
    """One line per kind of module the kit built in place of a Transformer Engine one (rank 0's
    modules in megatron.json; layer numbers folded)."""
    places: dict[str, list[str]] = {}
    for row in (calls.get("modules") or {}).get("0", []):
        if not (row.get("substitute") or row["module"].startswith("helpers.")):
            continue
        where = re.sub(r"layers\.\d+\.", "layers.*.", row["name"])
        what = row.get("substitute") or f"{row['class']} ({row['module']})"
        if where not in places.setdefault(what, []):
            places[what].append(where)
    return [f"the kit's {what} at {', '.join(where)}; Transformer Engine's module here"
            for what, where in places.items()]


def command_flags(calls: dict, spec, run_dir: Path) -> tuple[list[str], list[str], list[str]]:
    """(flags, comment lines, shell lines before torchrun): the model, layout, batch and optimizer
    from the record, then precision, data, tokenizer, iterations and checkpoints."""
    tokenizer, tokenizer_vocab, notes = tokenizer_arguments(calls, spec)
    data, data_notes = _data(calls, spec)
    precision, precision_notes = _precision(calls, spec)
    ckpt, ckpt_notes, before = _checkpoints(spec, run_dir)
    divisor = vocab_divisor(model_vocab(calls), tokenizer_vocab, spec.tp)
    if divisor is None:
        notes.append(f"vocabulary: Megatron-LM pads the tokenizer's {tokenizer_vocab} ids to a multiple of 128 x TP, "
                     f"not to the kit's {model_vocab(calls)}")
    extra = {**precision, **data, **tokenizer,
             # the kit's datasets build no attention mask (causal attention needs none; runtime/data/indexed.py)
             "create_attention_mask_in_dataloader": False,
             "make_vocab_size_divisible_by": divisor if divisor not in (None, PAD_CHOICES[0]) else None,
             **_iterations(calls, spec), **ckpt}
    flags, seen = [], set()
    for flag in megatron_flags.flags(calls) + megatron_flags.named(extra):
        option = flag.split(" ", 1)[0]
        if option not in seen:
            seen.add(option)
            flags.append(flag)
    return flags, substitutes(calls) + precision_notes + notes + data_notes + ckpt_notes, before


# Megatron-LM's pretrain_gpt.py calls compile_helpers(), which runs `make` in megatron/core/datasets.
# A Megatron-LM checkout has the Makefile there; the megatron-core wheel ships the helpers compiled
# (helpers_cpp*.so) but not the Makefile, and make stops with "No targets specified and no makefile
# found". A Makefile with an empty default target lets it go on with the compiled helpers.
DATASET_HELPERS = [
    "# The megatron-core wheel ships megatron/core/datasets compiled but without its Makefile, which",
    "# pretrain_gpt.py's compile_helpers() runs: give it one with an empty default target (or use a checkout).",
    "datasets=\"$(python -c 'import importlib.util as u, os; ls = list(u.find_spec(\"megatron\").submodule_search_locations)",
    "print(next(os.path.join(p, \"core\", \"datasets\") for p in ls if os.path.isfile(os.path.join(p, \"core\", \"__init__.py\"))))')\"",
    "if [ ! -f \"$datasets/Makefile\" ]; then",
    "  printf 'default:\\n\\t@true\\n' > \"$datasets/Makefile\" || {",
    "    echo \"$datasets has no Makefile and is read-only: install megatron-core from a Megatron-LM checkout\"; exit 1; }",
    "fi",
]


def _quoted(flag: str) -> str:
    """A flag as shell words: a list of names one word per value (megatron_flags.words), any other
    value one word (a path with spaces stays one)."""
    return " ".join(shlex.quote(w) for w in megatron_flags.words(flag))


def script(calls: dict, spec, run_dir: Path) -> str:
    flags, notes, before = command_flags(calls, spec, run_dir)
    entry = entry_script(calls)
    lines = ["#!/usr/bin/env bash",
             f"# The kit's job {Path(run_dir).name}",
             f"# as Megatron-LM's {entry} on {spec.world_size} GPU(s): the same model, layout, batch, schedule,",
             "# optimizer, data and tokenizer, in bf16 on Transformer Engine's modules.",
             "# Megatron-LM's own parse_args + validate_args accept it (helpers/rundir/megatron_lm_check.py).",
             "# MEGATRON_LM: a Megatron-LM checkout. Several nodes: run it on each with torchrun's --nnodes,",
             "# --node-rank and --rdzv-* flags, --nproc-per-node = one node's GPUs.",
             *([ "# Where the kit's job differs:"] + [f"#   {n}" for n in notes] if notes else []),
             "set -euo pipefail",
             "export CUDA_DEVICE_MAX_CONNECTIONS=1  # Megatron-LM asserts it with TP or CP below Blackwell",
             *DATASET_HELPERS,
             *before,
             f'torchrun --nproc-per-node {spec.world_size} "${{MEGATRON_LM:-.}}/{entry}" \\']
    body = [f"    {_quoted(f)}" for f in flags]
    return "\n".join(lines + [b + " \\" for b in body[:-1]] + body[-1:]) + "\n"


def arguments(script_or_path) -> list[str]:
    """The entry script's arguments in a written megatron-lm.sh (a path or its text), as argv."""
    text = Path(script_or_path).read_text() if isinstance(script_or_path, Path) or (
        isinstance(script_or_path, str) and "\n" not in script_or_path) else script_or_path
    joined = re.sub(r"\\\n", " ", text)
    for line in joined.splitlines():
        if line.startswith("torchrun "):
            words = shlex.split(line)
            at = next(i for i, w in enumerate(words) if w.endswith(tuple(set(ENTRY.values()) | {"pretrain_gpt.py"})))
            return words[at + 1:]
    raise ValueError("no torchrun line in the script")


def write(run_dir: Path, calls: dict, spec) -> Path:
    path = Path(run_dir) / names.MEGATRON_LM_SCRIPT
    path.write_text(script(calls, spec, run_dir))
    path.chmod(0o755)
    return path
