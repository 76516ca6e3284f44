"""Real data before any process starts: the source resolves (files present and readable), SFT
examples parse and fill every split, the tokenizer fits the model's vocabulary, the evaluation
fields make sense. Category "data". (Where the text comes from: helpers/job/data_source.py.)"""
from __future__ import annotations

from pathlib import Path

from helpers.errors import DataNotFound
from helpers.job import data_source, tokenizer
from helpers.job.models import ModelPreset
from helpers.job.rules.violation import Found, Violation


def check(spec, model: ModelPreset | None) -> list[Violation]:
    v = Found("data")
    if spec.data == "synthetic" or spec.data not in data_source.DATA_KINDS:
        return v  # synthetic tokens need nothing; an unknown kind is fields.py's
    if spec.eval_iters < 1 or spec.eval_interval < 0:
        v.add("eval_counts", f"eval_iters must be >= 1 and eval_interval >= 0, not {spec.eval_iters} and "
              f"{spec.eval_interval}", "use eval_iters >= 1; eval_interval 0 validates after the last iteration only")
    if model is not None and spec.tokenizer in tokenizer.NAMES:
        need = tokenizer.vocab_size(spec.tokenizer)
        if need > model.vocab_size:
            padded = -(-need // 128) * 128
            fix = (f"tokenizer='byte' ({tokenizer.vocab_size('byte')} tokens), or a tokenizer of at most "
                   f"{model.vocab_size} tokens" if model.built_from_hf else
                   f"model_overrides={{'vocab_size': {padded}}} (the tokenizer's size padded to a multiple of 128), "
                   f"or tokenizer='byte' ({tokenizer.vocab_size('byte')} tokens, fits the tiny presets)")
            v.add("tokenizer_exceeds_vocab", f"tokenizer {spec.tokenizer!r} has {need} tokens but model "
                  f"{model.name!r} has vocab_size {model.vocab_size}", fix)
    try:
        src = data_source.resolve(spec.data, spec.data_dir)
        tokenizer.files(spec.tokenizer, Path(src.tokenizer_dir) if src.tokenizer_dir else None)
    except DataNotFound as e:
        message, _, fix = str(e).partition("; ")
        v.add("data_not_found", message, fix or "see data/README.md")
        return v
    if src.kind == "sft":
        try:
            for split, rows in data_source.sft_splits(src).items():
                if not rows:
                    v.add("sft_split_empty", f"SFT data: the {split} split is empty ({src.splits.get(split)})",
                          "give more examples (each split needs at least one)")
        except ValueError as e:
            v.add("sft_examples_invalid", str(e),
                  'write one {"prompt": str, "response": non-empty str} object per line')
    return v
