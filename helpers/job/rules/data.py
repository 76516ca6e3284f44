"""Real data before any process starts: the source resolves (files present, readable, UTF-8, the
column there), every split gets documents, the tokenizer fits the model's vocabulary (an indexed
dataset's largest token id too), conversations have a chat template to render them, the evaluation
fields make sense. Category "data". (Where the data comes from: helpers/job/data/.)

The source was resolved and pinned once (rules/resolve.py); this rule reads a sample of it
(helpers/job/data/sample.py: the first documents of each file parsed, every document counted) and
the first SAMPLE_TOKENS tokens of an indexed dataset, so a source of any size is checked quickly."""
from __future__ import annotations

from pathlib import Path

from helpers.errors import DataNotFound
from helpers.job import data
from helpers.job.data import chat, documents, indexed, tokenizers
from helpers.job.data.pinned import Pinned
from helpers.job.models import ModelPreset
from helpers.job.violation import Found, Violation


SAMPLE_TOKENS = 1 << 26  # of an indexed dataset, for its largest token id (128 MiB of uint16 ids)


def check(spec, model: ModelPreset | None, pinned: Pinned | None = None,
          error: Exception | None = None) -> list[Violation]:
    """`pinned`: the source as resolve pinned it; `error`: why it did not resolve (DataNotFound, ValueError)."""
    v = Found("data")
    if spec.data == "synthetic":
        return v
    if spec.eval_iters < 1 or spec.eval_interval < 0:
        v.add("eval_counts", f"eval_iters must be >= 1 and eval_interval >= 0, not {spec.eval_iters} and "
              f"{spec.eval_interval}", "use eval_iters >= 1; eval_interval 0 validates after the last iteration only")
    if not _split_ok(spec.data_split):
        v.add("data_split_invalid", f"data_split={spec.data_split!r} is not three non-negative train,valid,test "
              "weights", "use e.g. '90,5,5'")
        return v
    if spec.tokenizer == "hf" and not tokenizers.has_folder_tokenizer(spec.hf_model):
        v.add("hf_tokenizer_missing", "tokenizer='hf' is the hf_model folder's own tokenizer, but "
              + (f"{spec.hf_model} holds none" if spec.hf_model else "hf_model is not set"),
              "save the model's tokenizer there (tokenizer.save_pretrained(folder)), or pick byte, gpt2 or qwen3")
        return v
    if isinstance(error, DataNotFound):
        v.add("data_not_found", *_message_and_fix(error))
        return v
    if error is not None or pinned is None:
        v.add("data_unreadable", str(error or "the data source was not resolved"),
              "fix the file, or point data at another source")
        return v
    src = pinned.source
    if model is not None:
        v += _vocabulary(spec, model, src)
    try:
        tokenizers.files(spec.tokenizer, Path(src.tokenizer_dir) if src.tokenizer_dir else None)
    except DataNotFound as e:
        v.add("tokenizer_files_missing", *_message_and_fix(e))
    try:
        if src.kind == "indexed":
            counts = {"all": indexed.header(src.files["prefix"]).sequences}
        else:
            sampled = data.sample(src)
            counts = sampled.counts
            if src.kind == "chat":
                v += _conversations(spec, sampled)
    except ValueError as e:
        v.add("data_unreadable", str(e), "fix the file, or point data at another source")
        return v
    for split, n in (documents.split_sizes(counts["all"], src.split) if "all" in counts else counts).items():
        if n == 0:
            v.add("data_split_empty", f"the {split} split gets no documents (of {sum(counts.values())}; "
                  f"data_split={spec.data_split!r})", "give more documents, or a larger weight to that split")
    return v


def _message_and_fix(e: DataNotFound) -> tuple[str, str]:
    message, _, fix = str(e).partition("; ")
    return message, fix or "see data/README.md"


def _split_ok(split: str) -> bool:
    try:
        weights = [float(w) for w in split.split(",")]
    except ValueError:
        return False
    return len(weights) == 3 and all(w >= 0 for w in weights) and weights[0] > 0


def _vocabulary(spec, model: ModelPreset, src) -> list[Violation]:
    """The tokenizer's tokens (or an indexed dataset's largest id) against the model's vocabulary."""
    v = Found("data")
    if src.kind == "indexed":
        top = indexed.max_token_id(src.files["prefix"], SAMPLE_TOKENS)
        if top >= model.vocab_size:
            v.add("indexed_ids_exceed_vocab", f"the indexed dataset {src.files['prefix']} holds token id {top}, but "
                  f"model {model.name!r} has vocab_size {model.vocab_size}: it was tokenized for another vocabulary",
                  "use the dataset tokenized with this model's tokenizer, or give the text to tokenize")
        return v
    need = tokenizers.vocab_size(spec.tokenizer, spec.hf_model)
    if need <= model.vocab_size:
        return v
    own = tokenizers.has_folder_tokenizer(spec.hf_model)
    if model.built_from_hf:
        fix = ("tokenizer='hf' (the model's own tokenizer)" if own and spec.tokenizer != "hf" else
               f"a tokenizer of at most {model.vocab_size} tokens, e.g. tokenizer='byte'")
    else:
        fix = (f"model_overrides={{'vocab_size': {-(-need // 128) * 128}}} (the tokenizer's size padded to a "
               f"multiple of 128), or tokenizer='byte' ({tokenizers.ByteTokenizer.vocab_size} tokens, "
               f"fits the tiny presets)")
    v.add("tokenizer_exceeds_vocab", f"tokenizer {spec.tokenizer!r} has {need} tokens but model {model.name!r} has "
          f"vocab_size {model.vocab_size}", fix)
    return v


def _conversations(spec, sampled: data.Sample) -> list[Violation]:
    """Conversations need a chat template, unless every one is a prompt/response pair; an HF chat
    template must render them turn by turn (checked on the first). `sampled`: the source's sample."""
    v = Found("data")
    conversations = [c for d in sampled.documents.values() for c in d]
    template = tokenizers.chat_template(spec.tokenizer, spec.hf_model)
    if template is None:
        others = sum(not chat.is_pair(c) for c in conversations)
        if others:
            of = f"{len(conversations)} examples" if sampled.complete else f"the first {len(conversations)} examples"
            v.add("chat_needs_template", f"{others} of {of} are conversations with more than "
                  f"a prompt and a response, and tokenizer {spec.tokenizer!r} has no chat template to render them",
                  "use an hf_model whose tokenizer has a chat template (tokenizer='hf'), or prompt/response pairs")
        return v
    if conversations:
        try:
            tokenizers.HFTokenizer(spec.hf_model).chat(conversations[0])
        except ValueError as e:
            v.add("chat_template_unsplittable", f"tokenizer 'hf' of {spec.hf_model}: {e}",
                  "use a chat template that renders each turn after the ones before it")
    return v
