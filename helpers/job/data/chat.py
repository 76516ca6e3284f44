"""Chat examples for supervised fine-tuning: what one example is (a conversation, messages with
roles), how a row of the user's data becomes one, the kit's generated set, and the training sample
a tokenized example becomes (padded, the loss on the answers only).

A row is a conversation when it has `messages` (or the column named by `data_column`): a list of
{"role": "system" | "user" | "assistant", "content": str} with at least one assistant turn; or a
`prompt` and a `response` (one user and one assistant turn). Tokenizing a conversation (the
tokenizer's chat template, helpers/job/data/tokenizers.py) gives its token ids and, for each
token, whether it belongs to an assistant's answer: those are the tokens trained on."""
from __future__ import annotations

import random

ROLES = ("system", "user", "assistant")
MESSAGES = "messages"


def conversation(row: dict, column: str | None = None, where: str = "") -> list[dict]:
    """The messages of one row. ValueError naming `where` (file and line) and what is wrong."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected an object, got {type(row).__name__}")
    key = column or MESSAGES
    if key in row:
        messages = row[key]
        if not isinstance(messages, list) or not messages:
            raise ValueError(f"{where}: {key!r} must be a non-empty list of {{role, content}} messages")
        for m in messages:
            if not (isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)):
                raise ValueError(f"{where}: every message needs a role in {ROLES} and a string content, got "
                                 f"{str(m)[:80]!r}")
        if not any(m["role"] == "assistant" and m["content"] for m in messages):
            raise ValueError(f"{where}: no assistant message with content: nothing to train on")
        return [{"role": m["role"], "content": m["content"]} for m in messages]
    if column is None and isinstance(row.get("prompt"), str) and isinstance(row.get("response"), str) \
            and row["response"]:
        return [{"role": "user", "content": row["prompt"]}, {"role": "assistant", "content": row["response"]}]
    raise ValueError(f"{where}: expected {key!r} (a list of messages)"
                     + ("" if column else ' or a "prompt" and a non-empty "response"') + f", got keys {sorted(row)}")


def is_pair(messages: list[dict]) -> bool:
    """One user turn and one assistant turn: what a tokenizer without a chat template can still
    train (the prompt's tokens, then the response's and the end-of-document token)."""
    return [m["role"] for m in messages] == ["user", "assistant"]


# ---- the generated set (deterministic: the same on every node and every run) ---------------------
_WORDS = ("apple stone river cloud tiger piano garden candle rocket pepper silver window planet "
          "forest marble dragon bottle carpet ladder magnet").split()


def generated(split: str, count: int | None = None) -> list[dict]:
    """Small prompt/response tasks a tiny model can start to learn: reverse, uppercase, add."""
    n = count or {"train": 400, "valid": 40, "test": 40}[split]
    rng = random.Random(f"kit-sft-{split}")
    out = []
    for _ in range(n):
        task = rng.randrange(3)
        if task == 0:
            w = rng.choice(_WORDS)
            out.append({"prompt": f"Reverse the word: {w}\nAnswer: ", "response": w[::-1]})
        elif task == 1:
            w = rng.choice(_WORDS)
            out.append({"prompt": f"Uppercase: {w}\nAnswer: ", "response": w.upper()})
        else:
            a, b = rng.randrange(10, 50), rng.randrange(10, 50)
            out.append({"prompt": f"What is {a} plus {b}?\nAnswer: ", "response": str(a + b)})
    return out


# ---- one training sample -------------------------------------------------------------------------
def sample(ids, trained, seq_len: int, pad: int) -> dict:
    """tokens/labels/loss_mask/position_ids (numpy int64/float32 arrays) of one padded SFT example.
    `ids` are the example's tokens, `trained[j]` is 1 where token j belongs to an answer (it is then
    a label the loss counts). An example too long for seq_len + 1 tokens keeps a window that starts
    early enough to hold the first answer's beginning: the context before it loses its start, so that
    at least half a sequence (or the whole answer, if shorter) is trained on; a long answer is cut.
    The worker's SFTDataset (helpers/runtime/data/sft.py) turns these into tensors; lesson 14 draws one."""
    import numpy

    ids, trained = numpy.asarray(ids, dtype=numpy.int64), numpy.asarray(trained, dtype=numpy.int64)
    answers = numpy.flatnonzero(trained)
    first = int(answers[0]) if len(answers) else len(ids)
    keep = min(len(ids) - first, max(1, seq_len // 2))
    start = max(0, first - (seq_len + 1 - keep))
    ids, trained = ids[start:start + seq_len + 1], trained[start:start + seq_len + 1]
    n = len(ids) - 1  # predicted positions
    tokens = numpy.full(seq_len, pad, dtype=numpy.int64)
    labels = numpy.full(seq_len, pad, dtype=numpy.int64)
    mask = numpy.zeros(seq_len, dtype=numpy.float32)
    tokens[:n], labels[:n] = ids[:-1], ids[1:]
    mask[:n] = trained[1:]  # label j is token j + 1: counted when that token is an answer's
    return {"tokens": tokens, "labels": labels, "loss_mask": mask,
            "position_ids": numpy.arange(seq_len, dtype=numpy.int64)}
