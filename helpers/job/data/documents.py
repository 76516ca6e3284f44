"""The user's data as it comes (`data=PATH`): which kind of source a path is, and its documents.

  a folder of .txt files             one document per file                                  text
  a .txt file                        one document per paragraph (blank-line separated)       text
  a .jsonl file, or a folder of them one row per line                                        text or chat
  a .parquet file, or a folder       one row per Parquet row (read with pyarrow)             text or chat
  PREFIX (PREFIX.bin + PREFIX.idx)   a Megatron indexed dataset, tokenized already            indexed

A JSONL/Parquet row is text when its `data_column` (default `text`) holds a string, and a chat
example when it holds a list of messages (default `messages`) or the row has `prompt` and `response`
(helpers/job/data/chat.py). A folder holding `train`, `valid` and `test` files brings its own
splits; any other source is one set of documents that Megatron's `split` (JobSpec.data_split,
"train,valid,test" weights) divides, as Megatron-LM's `--split` does. Every problem (a missing or
empty file, a column that is not there, text that is not UTF-8, a row that is neither text nor a
conversation, a .bin without its .idx) is a ValueError or DataNotFound naming the file and the fix.
Files are read a document at a time (`file_documents`) and counted without parsing (`count`), so the
data rule can check the first documents of a file of any size (helpers/job/data/sample.py)."""
from __future__ import annotations

import json
from pathlib import Path

from helpers.errors import DataNotFound
from helpers.job.data import chat
from helpers.job.data.source import Source

TEXT = "text"
SPLITS = ("train", "valid", "test")
ROW_FORMATS = (".jsonl", ".parquet")
PARQUET_BATCH = 1024  # rows read at a time
HOW = ("give a folder of .txt files, a .txt, .jsonl or .parquet file (or a folder of them), or the prefix of a "
       "Megatron indexed dataset (PREFIX.bin + PREFIX.idx)")


def source(path: str, column: str | None, split: str) -> Source:
    """What `path` is (see the module docstring); DataNotFound or ValueError otherwise."""
    p = Path(path).expanduser()
    bin_, idx = Path(str(p) + ".bin"), Path(str(p) + ".idx")
    if p.suffix in (".bin", ".idx"):
        bin_, idx, p = p.with_suffix(".bin"), p.with_suffix(".idx"), p.with_suffix("")
    if bin_.exists() or idx.exists():
        missing = [f.name for f in (bin_, idx) if not f.is_file()]
        if missing:
            raise DataNotFound(f"indexed dataset {p}: {' and '.join(missing)} missing (Megatron writes PREFIX.bin "
                               "and PREFIX.idx together); copy both files, or give the text to tokenize instead")
        return Source("indexed", "local", {"prefix": str(p)}, _split_words(split, f"documents of {p.name}"),
                      format="indexed", split=split)
    if not p.exists():
        raise DataNotFound(f"data {p} does not exist; {HOW}")
    files = sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith(".")) if p.is_dir() else [p]
    suffixes = {f.suffix for f in files}
    if not files:
        raise DataNotFound(f"data folder {p} is empty; {HOW}")
    if len(suffixes) > 1:
        raise ValueError(f"data folder {p} mixes {', '.join(sorted(suffixes))} files; give one kind per folder")
    suffix = suffixes.pop()
    if suffix == ".txt":
        what = f"the {len(files)} .txt files of {p.name}" if p.is_dir() else f"the paragraphs of {p.name}"
        return Source(TEXT, "local", _roles(files, p), _split_words(split, what), format="txt", split=split)
    if suffix not in ROW_FORMATS:
        raise ValueError(f"data {p}: {suffix or 'files without a suffix'} is not a format the kit reads; {HOW}")
    kind, key = _kind_of(_first_row(files[0]), column, files[0])
    own = {f.stem: f for f in files}
    if p.is_dir() and set(own) == set(SPLITS):  # the folder brings its own splits
        return Source(kind, "local", {s: str(own[s]) for s in SPLITS}, {s: own[s].name for s in SPLITS},
                      format=suffix[1:], column=key)
    return Source(kind, "local", _roles(files, p), _split_words(split, f"the rows of {p.name}"),
                  format=suffix[1:], column=key, split=split)


def _roles(files: list[Path], root: Path) -> dict:
    return {"all" if len(files) == 1 else f"all/{f.relative_to(root)}": str(f) for f in files}


def _split_words(split: str, what: str) -> dict:
    weights = [float(w) for w in split.split(",")]
    total = sum(weights) or 1.0
    return {s: f"{w / total:.0%} of {what} (Megatron's split {split})" for s, w in zip(SPLITS, weights)}


def _kind_of(row, column: str | None, where: Path) -> tuple[str, str | None]:
    """("text", key) or ("chat", key) for a source whose first row is `row`."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: rows must be objects, the first one is {type(row).__name__}")
    if column is not None:
        if column not in row:
            raise ValueError(f"{where}: no column {column!r} (it has {sorted(row)}); set data_column to one of them")
        return (TEXT, column) if isinstance(row[column], str) else ("chat", column)
    if TEXT in row and isinstance(row[TEXT], str):
        return TEXT, TEXT
    if chat.MESSAGES in row or ("prompt" in row and "response" in row):
        return "chat", None
    raise ValueError(f"{where}: rows have {sorted(row)}, none of text, messages, or prompt + response; name the "
                     "column that holds the text or the conversation with data_column")


# ---- reading ---------------------------------------------------------------------------------------
def rows(path: Path):
    """(row, where) of a .jsonl or .parquet file."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq
        try:  # batch by batch: the first rows without the rest (the data rule's sample)
            batches = pq.ParquetFile(path).iter_batches(batch_size=PARQUET_BATCH)
            n = 0
            for batch in batches:
                for row in batch.to_pylist():
                    n += 1
                    yield row, f"{path}, row {n}"
        except Exception as e:  # pyarrow's errors: not a Parquet file, a truncated one
            raise ValueError(f"{path}: cannot be read as Parquet ({e})") from None
        return
    with open(path, encoding="utf-8") as f:
        try:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        yield json.loads(line), f"{path}, line {n}"
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{path}, line {n}: not JSON ({e.msg})") from None
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); convert it to UTF-8") from None


def _first_row(path: Path):
    for row, _ in rows(path):
        return row
    raise ValueError(f"{path} is empty: no rows")


def read_text(path: Path) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); convert it to UTF-8") from None
    if not text.strip():
        raise ValueError(f"{path} is empty: no text")
    return text


def paragraphs(text: str) -> list[str]:
    return [p.strip() for p in text.split("\n\n") if p.strip()]


def text_pieces(path: Path, size: int = 1 << 20):
    """A text file read as `read_text` reads it (UTF-8, newlines as \\n), handed on in pieces of
    about `size` characters cut at line ends: a file of any length in a bounded amount of memory."""
    with open(path, "rb") as f:
        offset, piece, held = 0, [], 0
        for line in f:
            try:
                text = line.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {offset + e.start}); convert it to "
                                 "UTF-8") from None
            offset += len(line)
            piece.append(text)
            held += len(text)
            if held >= size:
                yield "".join(piece)
                piece, held = [], 0
        if piece:
            yield "".join(piece)


def paragraphs_of(path: Path, piece_size: int = 1 << 20):
    """`paragraphs` of a .txt file, streamed (the same split, a piece of `text_pieces` at a time);
    ValueError when the file holds no text."""
    carry, found = "", False
    for piece in text_pieces(path, piece_size):
        parts = (carry + piece).split("\n\n")
        carry = parts.pop()  # may continue in the next piece
        for part in parts:
            if part.strip():
                found = True
                yield part.strip()
    if carry.strip():
        found = True
        yield carry.strip()
    if not found:
        raise ValueError(f"{path} is empty: no text")


def file_documents(src: Source, role: str, path: Path):
    """The documents of one of the source's files, in order, one at a time: texts (text sources) or
    conversations (chat sources). ValueError naming the file (and line or row) of a bad one."""
    path = Path(path)
    if src.format == "txt":
        if role.startswith("all/"):  # a folder of .txt files: one document per file
            yield read_text(path)
        else:
            yield from paragraphs_of(path)
        return
    found = False
    for row, where in rows(path):
        if src.kind == TEXT:
            value = row.get(src.column) if isinstance(row, dict) else None
            if not isinstance(value, str):
                raise ValueError(f"{where}: {src.column!r} is missing or not a string")
            if value.strip():
                found = True
                yield value
        else:
            found = True
            yield chat.conversation(row, src.column, where)
    if not found:
        raise ValueError(f"{path} is empty: no rows with content")


def count(src: Source, role: str, path: Path) -> int:
    """How many documents one file holds, counted without parsing them: a row per non-blank JSONL
    line (a row whose text is blank counts too), Parquet's row count from its footer, the streamed
    paragraphs of a .txt file, one per file of a folder of them (an empty file is refused)."""
    path = Path(path)
    if src.format == "txt":
        if role.startswith("all/"):
            if path.stat().st_size == 0:
                raise ValueError(f"{path} is empty: no text")
            return 1
        return sum(1 for _ in paragraphs_of(path))
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq
        try:
            n = pq.ParquetFile(path).metadata.num_rows
        except Exception as e:
            raise ValueError(f"{path}: cannot be read as Parquet ({e})") from None
    else:
        with open(path, "rb") as f:
            n = sum(1 for line in f if line.strip())
    if not n:
        raise ValueError(f"{path} is empty: no rows with content")
    return n


def documents(src: Source) -> dict[str, list]:
    """The source's documents by role (a split, or "all" for one source): texts (text sources) or
    conversations (chat sources), in file and row order."""
    out = {}
    for role, path in src.files.items():
        out.setdefault(role.split("/")[0], []).extend(file_documents(src, role, Path(path)))
    return out


def split_sizes(count: int, split: str) -> dict[str, int]:
    """Documents per split of `count` documents under Megatron's split weights (its builder's
    rounding: split i takes [round(b_i * count), round(b_{i+1} * count)))."""
    weights = [float(w) for w in split.split(",")]
    total = sum(weights)
    bounds, acc = [0.0], 0.0
    for w in weights:
        acc += w / total
        bounds.append(acc)
    return {s: int(round(bounds[i + 1] * count)) - int(round(bounds[i] * count)) for i, s in enumerate(SPLITS)}
