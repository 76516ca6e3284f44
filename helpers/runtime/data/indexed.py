"""Real data for the workers: text -> tokens -> Megatron's indexed dataset (.bin/.idx) -> Megatron's
own GPTDataset (pretraining) or the kit's SFTDataset (fine-tuning, sft.py), built by Megatron's
BlendedMegatronDatasetBuilder with its index cache.

Per node: local rank 0 of every node tokenizes the text into `<cache>/data/<key>/<host>/` and
builds the datasets once *before* torch.distributed starts, so Megatron's builder runs in its
single-process mode and writes the index cache (document/sample/shuffle indices) there; the other
local ranks wait for its ready file. After the process groups exist every rank builds the same
datasets from the cache (a cache hit). Nothing is shared between nodes except the recipe; every
node's file hashes go into the report so a node that read different bytes is caught.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
from pathlib import Path

import torch
from megatron.core.datasets.blended_megatron_dataset_builder import (
    BlendedMegatronDatasetBuilder,
)
from megatron.core.datasets.blended_megatron_dataset_config import (
    BlendedMegatronDatasetConfig,
)
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

from helpers.job import data_source, paths
from helpers.job import tokenizer as tokenizers
from helpers.job.spec import JobSpec
from helpers.rundir import names
from helpers.runtime.measure.gather import node_label

FORMAT = 1  # bump when tokenization or the on-disk layout changes (a new cache key)
SPLITS = ("train", "valid", "test")


# ---- sizes ------------------------------------------------------------------------------
def sizes(spec: JobSpec) -> list[int]:
    """Samples per split: training iterations, and eval_iters global batches for validation
    (the same fixed set at every evaluation, so its curve is comparable) and for test."""
    gb = spec.global_batch_size
    return [max(1, spec.iters) * gb, spec.eval_iters * gb, spec.eval_iters * gb]


# ---- preprocessing (text -> .bin/.idx) -------------------------------------------------------
def _texts(src: data_source.Source) -> dict[str, list[str]]:
    """Documents per split: WikiText articles, or SFT examples as JSON strings."""
    if src.kind == "wikitext":
        if src.origin == data_source.GENERATED:
            return {s: data_source.articles(data_source.generated_wikitext(s)) for s in SPLITS}
        read = {s: data_source.articles(Path(p).read_text(encoding="utf-8")) for s, p in src.files.items()}
        if "train" not in read:  # no train file: carve train/valid out of the valid file's articles
            arts = read["valid"]
            cut = int(len(arts) * data_source.TRAIN_FRACTION)
            read["train"], read["valid"] = arts[:cut], arts[cut:]
        return read
    examples = data_source.sft_splits(src)  # every split non-empty: the data rule sft_split_empty checked it
    return {s: [json.dumps(e) for e in ex] for s, ex in examples.items()}


def _write_indexed(prefix: Path, docs: list[list[list[int]]], vocab: int) -> None:
    """One document per entry, each a list of sequences (WikiText: [article]; SFT: [prompt, response])."""
    builder = IndexedDatasetBuilder(str(prefix) + ".bin", dtype=DType.optimal_dtype(vocab))
    for seqs in docs:
        for s in seqs:
            builder.add_item(torch.tensor(s, dtype=torch.int64))
        builder.end_document()
    builder.finalize(str(prefix) + ".idx")


def _tokenize(src: data_source.Source, tok, out: Path) -> dict:
    stats = {}
    for split, texts in _texts(src).items():
        if src.kind == "wikitext":
            docs = [[ids + [tok.eod]] for ids in tok.encode_batch(texts)]
        else:
            ex = [json.loads(t) for t in texts]
            prompts = tok.encode_batch([e["prompt"] for e in ex])
            responses = tok.encode_batch([e["response"] for e in ex])
            docs = [[p, r + [tok.eod]] for p, r in zip(prompts, responses)]
        _write_indexed(out / split, docs, tok.vocab_size)
        stats[split] = {"documents": len(docs), "tokens": sum(len(s) for d in docs for s in d)}
    return stats


def node_key(src: data_source.Source, tok) -> str:
    """Cache key of the tokenized data: format, source files' bytes (or the generator), tokenizer."""
    files = {k: paths.sha256(Path(v)) for k, v in sorted(src.files.items())}
    key = json.dumps([FORMAT, src.kind, src.origin, files, tok.unique_identifiers], sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def _hash_dir(folder: Path) -> dict[str, str]:
    return {p.name: paths.sha256(p) for p in sorted(folder.glob("*.bin")) + sorted(folder.glob("*.idx"))}


class Prepared:
    """This node's tokenized data and the facts the report needs."""

    def __init__(self, spec: JobSpec, src: data_source.Source):
        self.spec, self.src = spec, src
        tok_dir = Path(src.tokenizer_dir) if src.tokenizer_dir else None
        self.tokenizer = tokenizers.load(spec.tokenizer, tok_dir)
        node, self.host = node_label()  # one cache folder per node, simulated nodes included
        self.dir = (paths.cache_dir() / "data" / f"{src.kind}-{spec.tokenizer}-{node_key(src, self.tokenizer)}"
                    / (node or socket.gethostname()))

    def facts(self) -> dict:
        return json.loads((self.dir / "facts.json").read_text())

    def ensure_tokenized(self) -> None:
        if (self.dir / "facts.json").exists():
            return
        tmp = self.dir.with_name(self.dir.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        t0 = time.perf_counter()
        stats = _tokenize(self.src, self.tokenizer, tmp)
        tok_files = tokenizers.files(self.spec.tokenizer, Path(self.src.tokenizer_dir) if self.src.tokenizer_dir else None)
        facts = {"host": self.host, "source": self.src.to_dict(), "splits": stats,
                 "source_sha256": {k: paths.sha256(Path(v)) for k, v in self.src.files.items()},
                 "tokenizer": {"name": self.spec.tokenizer, "vocab_size": self.tokenizer.vocab_size,
                               "sha256": {k: paths.sha256(p) for k, p in tok_files.items()}},
                 "indexed_sha256": _hash_dir(tmp), "tokenize_s": round(time.perf_counter() - t0, 3)}
        (tmp / "facts.json").write_text(json.dumps(facts, indent=2))
        if self.dir.exists():  # another job on this node finished first: keep theirs
            shutil.rmtree(tmp)
        else:
            self.dir.parent.mkdir(parents=True, exist_ok=True)
            tmp.rename(self.dir)

    # ---- Megatron datasets -------------------------------------------------------------
    def config(self):
        common = dict(random_seed=self.spec.seed, sequence_length=self.spec.seq_len,
                      blend_per_split=[([str(self.dir / s)], None) for s in SPLITS],
                      path_to_cache=str(self.dir / "index-cache"), tokenizer=self.tokenizer)
        if self.src.kind == "wikitext":
            return GPTDatasetConfig(reset_position_ids=False, reset_attention_mask=False,
                                    eod_mask_loss=False, create_attention_mask=False, **common)
        return BlendedMegatronDatasetConfig(**common)

    def build(self) -> dict:
        from helpers.runtime.data.sft import SFTDataset

        cls = GPTDataset if self.src.kind == "wikitext" else SFTDataset
        built = BlendedMegatronDatasetBuilder(cls, sizes(self.spec), lambda: True, self.config()).build()
        return dict(zip(SPLITS, built))


def prepare(run_dir: Path, spec: JobSpec) -> Prepared:
    """Before torch.distributed starts: local rank 0 of each node tokenizes and builds the index
    cache; the node's other ranks wait for its ready file (which names this node's hashes)."""
    src = data_source.resolve(spec.data, spec.data_dir)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    prep = Prepared(spec, src)
    ready = Path(run_dir) / names.LOGS / f"data-ready-node{os.environ.get('GROUP_RANK', 0)}.json"
    if local_rank == 0:
        prep.ensure_tokenized()
        prep.build()  # single-process mode: Megatron writes the index cache on this node
        ready.write_text(json.dumps({"dir": str(prep.dir)}))
    else:
        deadline = time.monotonic() + spec.timeout_s
        while not ready.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"local rank 0 on {prep.host} did not finish preparing the data "
                                   f"({prep.dir}); see logs/rank*.log")
            time.sleep(0.1)
    return prep
