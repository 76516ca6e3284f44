"""Real data without launching jobs: where WikiText comes from, the errors for missing files,
tokenizers, WikiText article splitting, the SFT sample and its answer-only loss mask, and
Megatron's indexed dataset + GPTDataset over the kit's tokenized files. The user's own formats
(text folders, JSONL, Parquet, indexed datasets) and their bad inputs: test_data_formats.py."""
import json

import pytest

from helpers import launch
from helpers.errors import DataNotFound
from helpers.job import data, paths
from helpers.job.data import chat, tokenizers, wikitext
from helpers.job.spec import JobSpec

SHARED = paths.data_dir()
needs_shared = pytest.mark.skipif(
    SHARED is None or not (SHARED / wikitext.WIKITEXT / "wiki.valid.raw").exists(),
    reason="KIT_DATA_DIR with WikiText-2 and the tokenizers is not set (CI sets it)")


def test_default_spec_keeps_the_synthetic_source():
    s = JobSpec()
    assert s.data == "synthetic" and data.resolve(s) is None


def test_missing_data_dir_names_the_path_and_how_to_get_the_data(tmp_path):
    with pytest.raises(launch.InvalidJob) as e:
        launch.validate(JobSpec(data="wikitext", data_dir=str(tmp_path / "nowhere")))
    msg = str(e.value)
    assert str(tmp_path / "nowhere") in msg and "KIT_DATA_DIR" in msg and "generated" in msg


def test_unreadable_file_is_named(tmp_path):
    folder = tmp_path / wikitext.WIKITEXT
    folder.mkdir()
    (folder / "wiki.valid.raw").write_text(" = A = \n")
    (folder / "wiki.test.raw").mkdir()  # exists, but cannot be read as a file
    with pytest.raises(DataNotFound, match="wiki.test.raw"):
        wikitext.source(str(tmp_path))


def test_tokenizer_too_big_for_the_model_says_how_to_fix():
    with pytest.raises(launch.InvalidJob, match=r"vocab_size': 50304"):
        launch.validate(JobSpec(data="wikitext", data_dir="generated", tokenizer="gpt2"))


def test_generated_corpus_is_labelled_and_deterministic(monkeypatch):
    monkeypatch.delenv("KIT_DATA_DIR", raising=False)
    src = wikitext.source("generated")
    assert src.origin == "generated" and "generated" not in src.files
    assert wikitext.generated_wikitext("valid") == wikitext.generated_wikitext("valid")
    assert len(wikitext.articles(wikitext.generated_wikitext("valid"))) == 12


def test_articles_split_at_top_level_headings_only():
    text = " \n = One = \n \n a b \n = = Sub = = \n c \n \n = Two = \n \n d \n"
    arts = wikitext.articles(text)
    assert len(arts) == 2 and "".join(arts) == text
    assert arts[0].startswith(" \n = One") and arts[1].startswith(" \n = Two")


def test_hf_rows_convert_back_to_the_raw_file():
    assert wikitext.rows_to_raw(["", " = A = \n", "", " text \n"]) == " \n = A = \n \n text \n"


@needs_shared
def test_shared_data_resolves_with_the_valid_file_carved_into_train_and_valid():
    spec = JobSpec(data="wikitext", tokenizer="qwen3")
    src = data.resolve(spec)
    assert src.origin == "local" and set(src.files) == {"valid", "test"}
    assert "first 90%" in src.splits["train"] and src.splits["test"] == "wiki.test.raw"
    d = data.record(spec, data.pin(src))
    assert d["sha256"]["valid"].startswith("4cd0f687") and d["sha256"]["test"].startswith("173c87a5")


@needs_shared
def test_bpe_tokenizers_match_the_published_ids():
    q = tokenizers.load("qwen3", SHARED)
    g = tokenizers.load("gpt2", SHARED)
    assert q.encode("Hello world") == [9707, 1879] and q.vocab_size == 151669
    assert g.encode("Hello world") == [15496, 995] and g.vocab_size == 50257
    assert g.decode(g.encode(" = Robert Boulter = ")) == " = Robert Boulter = "


def test_byte_tokenizer_round_trips_and_fits_the_tiny_presets():
    t = tokenizers.ByteTokenizer()
    assert t.decode(t.encode("héllo")) == "héllo" and t.vocab_size <= 512 and t.eod == 256


def test_missing_tokenizer_file_is_named(tmp_path):
    with pytest.raises(DataNotFound, match=r"tokenizers/qwen3/tokenizer.json"):
        tokenizers.files("qwen3", tmp_path)


def test_a_row_that_is_no_conversation_is_named():
    with pytest.raises(ValueError, match="chat.jsonl, line 2: expected 'messages'"):
        chat.conversation({"prompt": "a"}, None, "chat.jsonl, line 2")
    with pytest.raises(ValueError, match="no assistant message"):
        chat.conversation({"messages": [{"role": "user", "content": "hi"}]}, None, "x")


def test_sft_loss_mask_covers_exactly_the_response_and_eod():
    import numpy

    ids, trained = numpy.array([10, 11, 12, 20, 21, 256]), numpy.array([0, 0, 0, 1, 1, 1])  # 256: eod
    s = chat.sample(ids, trained, seq_len=8, pad=257)
    assert s["tokens"].tolist() == [10, 11, 12, 20, 21, 257, 257, 257]
    assert s["labels"].tolist() == [11, 12, 20, 21, 256, 257, 257, 257]
    assert s["loss_mask"].tolist() == [0, 0, 1, 1, 1, 0, 0, 0]  # labels 20, 21, eod


def test_sft_long_prompt_keeps_response_tokens():
    import numpy

    ids = numpy.concatenate([numpy.arange(100), [500, 501]])
    s = chat.sample(ids, [0] * 100 + [1, 1], seq_len=8, pad=0)
    assert s["loss_mask"].sum() == 2 and s["labels"][-2:].tolist() == [500, 501]


def test_megatron_gpt_dataset_over_the_kit_files(tmp_path, monkeypatch):
    """Tokenize the generated corpus into .bin/.idx and read it back through Megatron's builder
    (single process): samples are seq_len tokens, labels shifted by one, the index cache on disk."""
    from helpers.runtime.data import indexed

    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    spec = JobSpec(data="wikitext", data_dir="generated", tokenizer="byte", seq_len=32, iters=3, micro_batch=2,
                   eval_iters=1)
    prep = indexed.Prepared(spec, data.pin(data.resolve(spec)))
    prep.ensure_tokenized()
    splits = prep.build()
    s = splits["train"][0]
    assert s["tokens"].shape == (32,) and s["tokens"][1:].tolist() == s["labels"][:-1].tolist()
    assert len(splits["train"]) >= 6 and len(splits["valid"]) >= 2
    assert list((prep.dir / "index-cache").glob("*GPTDataset-train-shuffle_index.npy"))
    facts = prep.facts()
    assert facts["source"]["origin"] == "generated" and set(facts["indexed_sha256"]) >= {"train.bin", "train.idx"}
    text = prep.tokenizer.decode(s["tokens"].tolist())
    assert text.isprintable() or "\n" in text


def test_sft_dataset_through_megatron_builder(tmp_path, monkeypatch):
    from helpers.runtime.data import indexed

    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    p = tmp_path / "mine.jsonl"
    p.write_text("".join(json.dumps({"prompt": f"Q{i}: ", "response": f"A{i}"}) + "\n" for i in range(20)))
    spec = JobSpec(data="sft", data_dir=str(p), tokenizer="byte", seq_len=16, iters=2, micro_batch=2, eval_iters=1,
                   data_split="80,10,10")
    src = data.resolve(spec)
    assert src.splits["train"].startswith("80% of the rows of mine.jsonl")
    prep = indexed.Prepared(spec, data.pin(src))
    prep.ensure_tokenized()
    splits = prep.build()
    assert prep.facts()["splits"]["all"]["documents"] == 20  # Megatron's split then takes 16 / 2 / 2
    assert [len(splits[s].indices) for s in ("train", "valid", "test")] == [16, 2, 2]
    s = splits["train"][0]
    answer = prep.tokenizer.decode(s["labels"][s["loss_mask"] > 0].tolist())
    assert answer.startswith("A") and s["loss_mask"].sum() == len(answer) + 1  # + the eod token
