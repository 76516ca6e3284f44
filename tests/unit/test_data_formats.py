"""The user's data as it comes (helpers/job/data/documents.py, indexed.py; job/rules/data.py): each
format resolves to the documents it holds and builds into Megatron's datasets (no processes:
Megatron's builder in its single-process mode), and each bad input is one named violation with a
fix, found before any process starts, with nothing already cached touched."""
import json

import pytest

from helpers import launch
from helpers.job import data, rules
from helpers.job.data import documents, indexed
from helpers.job.spec import JobSpec
from helpers.launch import tiny_hf

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 160, "vocab_size": 512,
         "hidden_act": "silu", "max_position_embeddings": 256, "tie_word_embeddings": False}


def jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def names(**job) -> list[str]:
    spec = rules.resolve(JobSpec(device="cpu", **job), rules.CPU_ONLY)
    return [v.name for v in rules.check(spec, rules.CPU_ONLY).violations]


def messages(spec: JobSpec) -> str:
    with pytest.raises(launch.InvalidJob) as err:
        launch.validate(spec)
    return str(err.value)


# ---- each format ------------------------------------------------------------------------------
def test_a_folder_of_txt_files_is_one_document_per_file(tmp_path):
    for i in range(20):
        (tmp_path / f"doc{i:02d}.txt").write_text(f"Document {i}.\n\nSecond paragraph of {i}.\n")
    src = data.resolve(JobSpec(data=str(tmp_path)))
    assert (src.kind, src.format, src.split) == ("text", "txt", "90,5,5")
    docs = data.read(src)
    assert list(docs) == ["all"] and len(docs["all"]) == 20 and docs["all"][3].startswith("Document 3.")
    assert documents.split_sizes(20, "90,5,5") == {"train": 18, "valid": 1, "test": 1}
    assert names(data=str(tmp_path)) == []


def test_a_txt_file_is_one_document_per_paragraph(tmp_path):
    path = tmp_path / "book.txt"
    path.write_text("\n\n".join(f"Paragraph {i} of the book." for i in range(30)))
    assert len(data.read(data.resolve(JobSpec(data=str(path))))["all"]) == 30


def test_jsonl_rows_are_text_or_conversations_by_their_fields(tmp_path):
    text = jsonl(tmp_path / "text.jsonl", [{"text": f"row {i}", "id": i} for i in range(20)])
    pairs = jsonl(tmp_path / "pairs.jsonl", [{"prompt": f"q{i}", "response": f"a{i}"} for i in range(20)])
    talks = jsonl(tmp_path / "talks.jsonl", [{"messages": [{"role": "user", "content": "hi"},
                                                           {"role": "assistant", "content": f"hello {i}"}]}
                                            for i in range(20)])
    assert (data.resolve(JobSpec(data=str(text))).kind, data.resolve(JobSpec(data=str(pairs))).kind,
            data.resolve(JobSpec(data=str(talks))).kind) == ("text", "chat", "chat")
    assert data.read(data.resolve(JobSpec(data=str(pairs))))["all"][0] == [
        {"role": "user", "content": "q0"}, {"role": "assistant", "content": "a0"}]
    body = jsonl(tmp_path / "body.jsonl", [{"body": f"row {i}"} for i in range(20)])
    assert data.read(data.resolve(JobSpec(data=str(body), data_column="body")))["all"][5] == "row 5"


def test_parquet_with_a_named_column_builds_megatrons_gpt_dataset(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from helpers.runtime.data import indexed as worker_data

    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    pq.write_table(pa.table({"content": [f"Sentence number {i} of the corpus." * 3 for i in range(40)]}),
                   tmp_path / "corpus.parquet")
    spec = JobSpec(data=str(tmp_path / "corpus.parquet"), data_column="content", tokenizer="byte", seq_len=32,
                   iters=2, micro_batch=2, eval_iters=1)
    src = data.resolve(spec)
    assert (src.kind, src.format, src.column) == ("text", "parquet", "content")
    prep = worker_data.Prepared(spec, data.pin(src))
    prep.ensure_tokenized()
    splits = prep.build()
    assert prep.facts()["splits"]["all"]["documents"] == 40
    sample = splits["train"][0]
    assert sample["tokens"].shape == (32,) and sample["tokens"][1:].tolist() == sample["labels"][:-1].tolist()
    assert len(splits["valid"]) >= 2 and len(splits["test"]) >= 2


def test_a_folder_with_train_valid_test_files_keeps_its_splits(tmp_path):
    for split, n in (("train", 30), ("valid", 3), ("test", 3)):
        jsonl(tmp_path / f"{split}.jsonl", [{"text": f"{split} {i}"} for i in range(n)])
    src = data.resolve(JobSpec(data=str(tmp_path)))
    assert src.split is None and set(src.files) == {"train", "valid", "test"}
    assert {k: len(v) for k, v in data.read(src).items()} == {"train": 30, "valid": 3, "test": 3}


def test_a_megatron_indexed_dataset_is_read_as_megatron_writes_it(tmp_path):
    """The kit's header reader against Megatron's own writer and reader."""
    import numpy
    import torch
    from megatron.core.datasets.indexed_dataset import DType, IndexedDataset, IndexedDatasetBuilder

    prefix = tmp_path / "corpus"
    builder = IndexedDatasetBuilder(str(prefix) + ".bin", dtype=DType.optimal_dtype(50257))
    rng = numpy.random.default_rng(0)
    for _ in range(25):
        builder.add_item(torch.tensor(rng.integers(0, 50000, rng.integers(5, 40)), dtype=torch.int64))
        builder.end_document()
    builder.add_item(torch.tensor([50256]))  # the largest id, in a last document
    builder.end_document()
    builder.finalize(str(prefix) + ".idx")
    megatron = IndexedDataset(str(prefix))
    head = indexed.header(prefix)
    assert (head.sequences, head.documents) == (len(megatron), len(megatron.document_indices) - 1) == (26, 26)
    assert head.dtype == "uint16" and indexed.max_token_id(prefix) == 50256
    src = data.resolve(JobSpec(data=str(prefix) + ".idx"))  # the prefix, or either file
    assert (src.kind, src.files) == ("indexed", {"prefix": str(prefix)})
    assert names(data=str(prefix), model_overrides={"vocab_size": 50304}) == []


# ---- each bad input -------------------------------------------------------------------------------
def test_bad_inputs_are_named_with_a_fix_before_start(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    jsonl(tmp_path / "rows.jsonl", [{"text": f"row {i}"} for i in range(20)])
    (tmp_path / "lonely.bin").write_bytes(b"\0" * 8)
    cases = {  # data field -> (violation, words the message must hold)
        str(tmp_path / "nowhere"): ("data_not_found", "does not exist"),
        str(tmp_path / "empty.jsonl"): ("data_unreadable", "is empty"),
        str(tmp_path / "latin1.txt"): ("data_unreadable", "not UTF-8"),
        str(tmp_path / "lonely"): ("data_not_found", "lonely.idx missing"),
    }
    for path, (name, words) in cases.items():
        message = messages(JobSpec(device="cpu", data=path))
        assert f"[{name}]" in message and words in message and "Fix:" in message, message
    message = messages(JobSpec(device="cpu", data=str(tmp_path / "rows.jsonl"), data_column="body"))
    assert "no column 'body'" in message and "data_column" in message
    message = messages(JobSpec(device="cpu", data=str(tmp_path / "rows.jsonl"), data_split="100,0,0"))
    assert "[data_split_empty] the valid split gets no documents" in message


def test_token_ids_beyond_the_vocabulary_are_refused(tmp_path):
    import torch
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    prefix = tmp_path / "gpt2"
    builder = IndexedDatasetBuilder(str(prefix) + ".bin", dtype=DType.optimal_dtype(50257))
    for i in range(20):
        builder.add_item(torch.tensor([i, 50256]))
        builder.end_document()
    builder.finalize(str(prefix) + ".idx")
    message = messages(JobSpec(device="cpu", data=str(prefix)))  # tiny-gpt: vocabulary 512
    assert "[indexed_ids_exceed_vocab]" in message and "token id 50256" in message and "vocab_size 512" in message


def test_a_conversation_needs_a_chat_template(tmp_path):
    talks = jsonl(tmp_path / "talks.jsonl", [{"messages": [{"role": "system", "content": "Be brief."},
                                                           {"role": "user", "content": "hi"},
                                                           {"role": "assistant", "content": "hello"}]}] * 20)
    message = messages(JobSpec(device="cpu", data=str(talks)))
    assert "[chat_needs_template]" in message and "20 of 20 examples" in message and "tokenizer 'byte'" in message


def test_a_tokenizer_too_large_names_the_real_model_and_a_fix_that_works(tmp_path):
    folder = tmp_path / "my-llama"
    tiny_hf.config_only(folder, LLAMA)
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1},
                                                                 "merges": []}}))
    message = messages(JobSpec(device="cpu", hf_model=str(folder), data="wikitext", data_dir="generated",
                               tokenizer="gpt2"))
    assert "tokenizer 'gpt2' has 50257 tokens but model 'my-llama' has vocab_size 512" in message
    assert "tokenizer='hf' (the model's own tokenizer)" in message
    spec = launch.validate(JobSpec(device="cpu", hf_model=str(folder), data="wikitext", data_dir="generated"))
    assert spec.tokenizer == "hf"  # auto: the folder's own tokenizer, which the rules accept


def test_a_refused_job_leaves_the_cache_as_it_was(tmp_path, monkeypatch):
    from helpers.runtime.data import indexed as worker_data

    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    good = jsonl(tmp_path / "good.jsonl", [{"text": f"row {i} " * 10} for i in range(20)])
    spec = JobSpec(data=str(good), tokenizer="byte", seq_len=16, iters=1, eval_iters=1)
    prep = worker_data.Prepared(spec, data.pin(data.resolve(spec)))
    prep.ensure_tokenized()
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").rglob("*")}
    good.write_text(good.read_text() + "not json\n")  # the same file, now broken
    assert "[data_unreadable]" in messages(JobSpec(device="cpu", data=str(good), tokenizer="byte"))
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").rglob("*")} == before
