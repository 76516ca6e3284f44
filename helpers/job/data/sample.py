"""What the data rule reads of a source before any process starts (helpers/job/rules/data.py): the
first documents of each file, parsed and checked as the workers will read them (rows, columns,
conversations, UTF-8), and every document counted without being parsed or kept (how many each split
gets). A source of any size is checked in a bounded amount of memory; a bad row further in than the
sample stops the node's tokenization with the same message (file and line) instead."""
from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from helpers.job.data import chat, documents, wikitext
from helpers.job.data.source import GENERATED, Source

SAMPLE_DOCUMENTS = 1000  # per role (a split, or "all"): the documents parsed before start


@dataclass(frozen=True)
class Sample:
    documents: dict  # role -> its first documents, parsed and checked (texts or conversations)
    counts: dict  # role -> how many documents it holds in all

    @property
    def complete(self) -> bool:
        """Every document was parsed (no role held more than the sample)."""
        return all(len(self.documents.get(role, ())) == n for role, n in self.counts.items())


def sample(src: Source, limit: int = SAMPLE_DOCUMENTS) -> Sample:
    """The first `limit` documents of each role and every role's count; ValueError (or DataNotFound)
    naming the file and the fix for what the sampled documents or the count find wrong."""
    if src.kind == "chat" and src.origin == GENERATED:
        docs = {s: [chat.conversation(row) for row in chat.generated(s)] for s in documents.SPLITS}
        return Sample(docs, {s: len(d) for s, d in docs.items()})
    if src.format == "wikitext":
        if src.origin == GENERATED:
            docs = wikitext.documents(src)
            return Sample(docs, {s: len(d) for s, d in docs.items()})
        return Sample({}, wikitext.article_counts(src))  # text: counts are all the rule needs
    docs: dict[str, list] = {}
    counts: dict[str, int] = {}
    for role, path in src.files.items():
        group = role.split("/")[0]
        kept = docs.setdefault(group, [])
        room = limit - len(kept)
        first = list(islice(documents.file_documents(src, role, Path(path)), room)) if room > 0 else []
        kept.extend(first)
        whole = len(first) < room  # the file ended inside the sample: counted exactly
        counts[group] = counts.get(group, 0) + (len(first) if whole else documents.count(src, role, Path(path)))
    return Sample(docs, counts)
