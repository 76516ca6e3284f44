"""Real data for the workers: documents -> tokens -> Megatron's indexed dataset (.bin/.idx) ->
Megatron's own GPTDataset (continued pretraining) or the kit's SFTDataset (fine-tuning, sft.py),
built by Megatron's BlendedMegatronDatasetBuilder with its index cache. Where the documents come
from is decided before start (helpers/job/data/); a Megatron indexed dataset the user gives is used
as it is, not tokenized again.

Per node: local rank 0 of every node tokenizes the documents into `<cache>/data/<key>/<node>/` and
builds the datasets once *before* torch.distributed starts, so Megatron's builder runs in its
single-process mode and writes the index cache (document/sample/shuffle indices) there; the other
local ranks wait for its ready file. After the process groups exist every rank builds the same
datasets from the cache (a cache hit). The source is the one pinned before start (data.json:
every file's size and SHA-256, helpers/job/data/pinned.py), not resolved again; the cache key holds
the pinned hashes, so a node checks a file's size before it uses its cache and the file's bytes
(SHA-256) only when it tokenizes them: a cache entry always holds the pinned bytes. Nothing is shared
between nodes except the recipe; every node's hashes go into the report. A new source, tokenizer or
format is a new cache key: nothing already cached is overwritten.

Splits: a source with a file per split (WikiText, a folder of train/valid/test files, the generated
sets) gives one indexed dataset per split (Megatron's `blend_per_split`); one set of documents gives
one indexed dataset that Megatron's `split` divides by documents (JobSpec.data_split)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
from pathlib import Path

from megatron.core.datasets.blended_megatron_dataset_builder import (
    BlendedMegatronDatasetBuilder,
)
from megatron.core.datasets.blended_megatron_dataset_config import (
    BlendedMegatronDatasetConfig,
)
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

from helpers.job import data, paths
from helpers.job.data import documents, tokenizers
from helpers.job.data.pinned import Pinned
from helpers.job.data.source import Source
from helpers.job.spec import JobSpec
from helpers.rundir import names, prepared
from helpers.runtime.data.indexed_files import write_indexed
from helpers.runtime.data.node import node_label

FORMAT = 2  # bump when tokenization or the on-disk layout changes (a new cache key)
SPLITS = documents.SPLITS


# ---- sizes ------------------------------------------------------------------------------
def sizes(spec: JobSpec) -> list[int]:
    """Samples per split: training iterations, and eval_iters global batches for validation
    (the same fixed set at every evaluation, so its curve is comparable) and for test."""
    gb = spec.global_batch_size
    return [max(1, spec.iters) * gb, spec.eval_iters * gb, spec.eval_iters * gb]


# ---- documents -> .bin/.idx -------------------------------------------------------------------
def _tokenize(src: Source, tok, out: Path) -> dict:
    stats = {}
    for role, docs in data.read(src).items():
        if src.kind == "text":
            tokenized = [[ids + [tok.eod]] for ids in tok.encode_batch(docs)]
        else:
            tokenized = [list(tok.chat(messages)) for messages in docs]
        write_indexed(out / role, tokenized, tok.vocab_size)
        stats[role] = {"documents": len(tokenized), "tokens": sum(len(d[0]) for d in tokenized)}
        if src.kind == "chat":
            stats[role]["trained_tokens"] = sum(sum(d[1]) for d in tokenized)
    return stats


def node_key(pinned: Pinned, tok) -> str:
    """Cache key of the tokenized data: format, the source (its files' pinned bytes, or the
    generator), tokenizer."""
    src = pinned.source
    key = json.dumps([FORMAT, src.kind, src.origin, src.format, src.column, src.split, pinned.sha256(),
                      tok.unique_identifiers], sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def _hash_dir(folder: Path) -> dict[str, str]:
    return {p.name: paths.sha256(p) for p in sorted(folder.glob("*.bin")) + sorted(folder.glob("*.idx"))}


class Prepared:
    """This node's tokenized data and the facts the report needs."""

    def __init__(self, spec: JobSpec, pinned: Pinned):
        src = pinned.source
        self.spec, self.pinned, self.src = spec, pinned, src
        self.tokenizer = tokenizers.load(spec.tokenizer, Path(src.tokenizer_dir) if src.tokenizer_dir else None,
                                         spec.hf_model)
        node, self.host = node_label()  # one cache folder per node, simulated nodes included
        self.dir = (paths.cache_dir() / "data" / f"{src.kind}-{spec.tokenizer}-{node_key(pinned, self.tokenizer)}"
                    / (node or socket.gethostname()))

    def facts(self) -> dict:
        return json.loads((self.dir / "facts.json").read_text())

    def prefixes(self) -> dict[str, str]:
        """The indexed datasets by role: a split's, "all", or the user's own prefix."""
        if self.src.kind == "indexed":
            return {"all": self.src.files["prefix"]}
        return {p.stem: str(p.with_suffix("")) for p in sorted(self.dir.glob("*.idx"))}

    def ensure_tokenized(self) -> None:
        """This node's cache entry: used when there (the files' sizes checked), else made from the
        files once their bytes are checked against the pinned SHA-256."""
        if (self.dir / "facts.json").exists():
            return self.pinned.verify()
        self.pinned.verify(hashes=True)
        tmp = self.dir.with_name(self.dir.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        t0 = time.perf_counter()
        stats = {} if self.src.kind == "indexed" else _tokenize(self.src, self.tokenizer, tmp)
        tok_dir = Path(self.src.tokenizer_dir) if self.src.tokenizer_dir else None
        tok_files = tokenizers.files(self.spec.tokenizer, tok_dir)
        given = self.pinned.sha256() if self.src.kind == "indexed" else {}  # verified above
        facts = {"host": self.host, "source": self.src.to_dict(), "splits": stats,
                 "source_sha256": self.pinned.sha256(),
                 "tokenizer": {"name": self.spec.tokenizer, "vocab_size": self.tokenizer.vocab_size,
                               "sha256": ({k: paths.sha256(p) for k, p in tok_files.items()}
                                          or self.tokenizer.unique_identifiers.get("files", {}))},
                 "indexed_sha256": _hash_dir(tmp) or given, "tokenize_s": round(time.perf_counter() - t0, 3)}
        (tmp / "facts.json").write_text(json.dumps(facts, indent=2))
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            tmp.rename(self.dir)
        except OSError:  # another job on this node finished first (rename onto a full folder fails): keep theirs
            shutil.rmtree(tmp)

    # ---- Megatron datasets -------------------------------------------------------------
    def config(self):
        prefixes = self.prefixes()
        where = (dict(blend=([prefixes["all"]], None), split=self.src.split) if "all" in prefixes
                 else dict(blend_per_split=[([prefixes[s]], None) for s in SPLITS]))
        common = dict(random_seed=self.spec.seed, sequence_length=self.spec.seq_len, **where,
                      path_to_cache=str(self.dir / "index-cache"), tokenizer=self.tokenizer)
        if self.src.kind == "chat":
            return BlendedMegatronDatasetConfig(**common)
        return GPTDatasetConfig(reset_position_ids=False, reset_attention_mask=False,
                                eod_mask_loss=False, create_attention_mask=False, **common)

    def build(self) -> dict:
        from helpers.runtime.data.sft import SFTDataset

        cls = SFTDataset if self.src.kind == "chat" else GPTDataset
        built = BlendedMegatronDatasetBuilder(cls, sizes(self.spec), lambda: True, self.config()).build()
        return dict(zip(SPLITS, built))


def prepare(run_dir: Path, spec: JobSpec) -> Prepared:
    """Before torch.distributed starts: local rank 0 of each node tokenizes the pinned source
    (data.json) and builds the index cache; the node's other ranks wait for its ready file."""
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    prep = Prepared(spec, prepared.data(run_dir))
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
