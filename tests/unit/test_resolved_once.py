"""Everything worked out once, before any process starts (helpers/job/rules/resolve.py): an HF
folder's safetensors headers are read once per job, the spec the rules check is the one spec.json
holds, the data rule reads a sample of the source and the workers read the run directory's
model.json and data.json instead of the HF folder or the data source. No process is started here:
`prepare` for jobs that need no seed checkpoint built, and the workers' own functions in-process."""
import ast
import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest

from helpers.errors import PreflightError
from helpers.job import checkpoint_dir, data, hf_model, hf_names, paths, rules
from helpers.job.data import documents
from helpers.job.spec import JobSpec
from helpers.launch import runner, tiny_hf
from helpers.rundir import names, prepared

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 160, "vocab_size": 512,
         "hidden_act": "silu", "max_position_embeddings": 256, "tie_word_embeddings": False}
RUNTIME = Path(__file__).resolve().parents[2] / "helpers" / "runtime"
# Functions under runtime/ that no rank runs: the notebook side calls them in its own process.
NOT_ON_A_RANK = {("measure/megatron_calls.py", "planned")}  # the record a job would write, made without starting it


def jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_an_hf_folders_headers_are_read_once_per_job(tmp_path, monkeypatch):
    """Two safetensors files, each header read once by `prepare` (resolve, every rule, the model's
    description and the run records share one read); model.json carries what the workers need."""
    folder = tiny_hf.config_only(tmp_path / "llama", LLAMA)
    extra = json.dumps({"extra.weight": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}).encode()
    (folder / "extra.safetensors").write_bytes(len(extra).to_bytes(8, "little") + extra)
    reads = Counter()
    read_names = hf_names.read_names

    def counted(file):
        reads[Path(file).name] += 1
        return read_names(file)

    monkeypatch.setattr(hf_names, "read_names", counted)
    spec, run_dir = runner.prepare(JobSpec(hf_model=str(folder), device="cpu", out=str(tmp_path / "runs")))
    assert reads == {"model.safetensors": 1, "extra.safetensors": 1}
    model, hf = prepared.model(run_dir)
    assert model == hf_model.describe(folder)  # the description the rules checked, as the workers build it
    assert hf["path"] == spec.hf_model and hf["architectures"] == ["LlamaForCausalLM"] and hf["renames"] == {}
    assert json.loads((run_dir / names.MANIFEST).read_text())["hf_model"]["config_sha256"] == hf["config_sha256"]


def test_the_spec_the_rules_checked_is_the_one_spec_json_holds(tmp_path, monkeypatch):
    """A real-data job with a seed checkpoint: the data source's path and the seed checkpoint's are
    decided by resolve, before the check; prepare changes no field after it."""
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    rows = jsonl(tmp_path / "rows.jsonl", [{"text": f"row {i} " * 8} for i in range(40)])
    job = JobSpec(data=str(rows), tokenizer="byte", device="cpu", seq_len=16, iters=1, eval_iters=1,
                  out=str(tmp_path / "runs"))
    first = rules.resolve(job, rules.CPU_ONLY)
    seed = checkpoint_dir.seed_path(first.spec, first.model)  # there already: prepare starts no process
    seed.mkdir(parents=True)
    (seed / checkpoint_dir.SEED_MARKER).write_text("")
    seen = []
    check = rules.check

    def recorded(resolved, env):
        seen.append(resolved)
        return check(resolved, env)

    monkeypatch.setattr(rules, "check", recorded)
    spec, run_dir = runner.prepare(job)
    assert len(seen) == 1 and JobSpec.read(run_dir / names.SPEC) == seen[0].spec == spec
    assert spec.seed_checkpoint_dir == str(seed) and spec.data == str(rows.resolve())
    pinned = prepared.data(run_dir)
    assert pinned.files["all"] == {"path": str(rows), "bytes": rows.stat().st_size, "sha256": paths.sha256(rows)}
    manifest = json.loads((run_dir / names.MANIFEST).read_text())
    assert manifest["spec"] == spec.to_dict() and manifest["data"]["sha256"] == pinned.sha256()


def test_a_worker_reads_the_pinned_source_and_checks_it_is_unchanged(tmp_path, monkeypatch):
    """The worker's data preparation (local rank 0 of a node, in-process) resolves, samples and
    checks nothing again; a data file changed after prepare is refused by name: by its size when
    the node's tokenized cache is there, by its SHA-256 when the node tokenizes it."""
    from helpers.runtime.data import indexed

    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    rows = jsonl(tmp_path / "rows.jsonl", [{"text": f"row {i} " * 8} for i in range(40)])
    spec, run_dir = runner.prepare(JobSpec(data=str(rows), tokenizer="byte", device="cpu", seq_len=16, iters=1,
                                           eval_iters=1, seed_checkpoint=False, out=str(tmp_path / "runs")))

    def again(*args, **kwargs):
        raise AssertionError("a worker worked out the job again")

    for module, name in ((data, "resolve"), (data, "sample"), (data, "pin"), (rules, "resolve"), (rules, "check")):
        monkeypatch.setattr(module, name, again)
    prep = indexed.prepare(run_dir, spec)
    assert prep.facts()["splits"]["all"]["documents"] == 40
    assert prep.facts()["source_sha256"] == {"all": paths.sha256(rows)}

    rows.write_text(rows.read_text() + json.dumps({"text": "one more row"}) + "\n")
    with pytest.raises(PreflightError, match=r"rows.jsonl \(all\) changed since the job was prepared \(\d+ bytes"):
        indexed.prepare(run_dir, spec)  # the node's cache is there: the size tells
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "other-cache"))
    text = rows.read_text().splitlines(keepends=True)[:40]
    rows.write_text("".join(text).replace("row 1 ", "row 9 ", 1))  # the pinned size, other bytes
    with pytest.raises(PreflightError, match="other bytes than pinned"):
        indexed.prepare(run_dir, spec)  # nothing cached on this node: the bytes are checked as they are tokenized


def test_workers_never_import_the_rules_or_read_the_hf_folder():
    """No module under helpers/runtime/ imports the rules (only rules.environment: whether Transformer
    Engine is installed) or the notebook side's HF readers, nor calls data.resolve or model_preset."""
    banned_imports = ("helpers.job.rules", "helpers.job.hf_model", "helpers.job.hf_names")
    banned_calls = {("data", "resolve"), ("data", "sample"), ("data", "pin"), ("rules", "resolve"),
                    ("rules", "check"), ("hf_model", "read"), ("hf_model", "read_config")}
    found = []
    for file in sorted(RUNTIME.rglob("*.py")):
        where = str(file.relative_to(RUNTIME))
        for node in _walk(ast.parse(file.read_text()), lambda f: (where, f.name) in NOT_ON_A_RANK):
            modules = []
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for m in modules:
                if m.startswith(banned_imports) and not m.startswith("helpers.job.rules.environment"):
                    found.append(f"{file.relative_to(RUNTIME)} imports {m}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                if node.func.attr == "model_preset" or (
                        isinstance(owner, ast.Name) and (owner.id, node.func.attr) in banned_calls):
                    found.append(f"{file.relative_to(RUNTIME)}:{node.lineno} calls .{node.func.attr}()")
    assert found == []


def _walk(tree: ast.AST, skipped):
    """ast.walk without the bodies of the functions `skipped` picks."""
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and skipped(node):
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def test_the_data_rule_parses_a_sample_and_counts_the_rest(tmp_path):
    """The first documents of each file are parsed (a bad row among them is refused by name), the
    rest only counted; a streamed .txt splits into the paragraphs its whole text does."""
    rows = jsonl(tmp_path / "rows.jsonl", [{"text": f"row {i}"} for i in range(30)] + [{"body": "no text"}])
    src = data.resolve(JobSpec(data=str(rows)))
    read = data.sample(src, limit=10)
    assert len(read.documents["all"]) == 10 and read.counts == {"all": 31} and not read.complete
    with pytest.raises(ValueError, match=r"rows.jsonl, line 31: 'text' is missing or not a string"):
        data.sample(src, limit=100)
    book = tmp_path / "book.txt"
    book.write_text("\r\n".join(["Para one.", "", "", "", "Para two, é.", " ", "", "Three", "", "x" * 50]))
    want = documents.paragraphs(documents.read_text(book))
    for size in (1, 3, 7, 1 << 20):  # pieces cut anywhere between line ends
        assert list(documents.paragraphs_of(book, size)) == want
    assert data.sample(data.resolve(JobSpec(data=str(book))), limit=2).counts == {"all": len(want)} == {"all": 4}


def test_derived_jobs_reset_what_the_fields_metadata_says():
    """A job repeated from its manifest resolves its seed checkpoint again (resolved=True), and the
    seed checkpoint's run keeps the model and how it is built while every per_run field goes back
    to its default. A new field must say which it is: the kept set below then fails until it does."""
    spec = JobSpec(tp=2, pp=2, dist_opt=True, megatron_fsdp="optim", fp8_param_gather=True, data="wikitext",
                   save_interval=2, export_hf="out", faults=["exit@2"], seed=7, model="tiny-moe",
                   seed_checkpoint_dir="/cache/seed")
    assert spec.unresolved().seed_checkpoint_dir is None and spec.unresolved().tp == 2
    seed_run = dataclasses.replace(spec, **JobSpec.per_run_defaults())
    assert (seed_run.tp, seed_run.pp, seed_run.dist_opt, seed_run.megatron_fsdp, seed_run.fp8_param_gather,
            seed_run.data, seed_run.save_interval, seed_run.export_hf, seed_run.faults) == \
        (1, 1, False, None, False, "synthetic", None, None, [])
    assert (seed_run.model, seed_run.seed) == ("tiny-moe", 7)
    kept = {f.name for f in dataclasses.fields(JobSpec) if not f.metadata.get("per_run")}
    assert kept == {
        "nproc", "micro_batch", "seq_len", "model", "model_overrides", "hf_model", "iters", "lr", "lr_warmup_iters",
        "lr_decay", "lr_decay_iters", "min_lr", "clip_grad", "weight_decay", "adam_beta1", "adam_beta2", "adam_eps",
        "overlap_grad_reduce", "overlap_param_gather", "ddp_bucket_size", "grad_reduce_dtype", "seed",
        "moe_dispatcher", "backend", "attention", "cross_entropy", "recompute_granularity", "recompute_method",
        "recompute_num_layers", "recompute_modules", "tokenizer", "data_dir", "data_column", "data_split",
        "eval_interval", "eval_iters", "device", "precision", "fp8_recipe", "fp8_output_layer", "seed_checkpoint",
        "seed_checkpoint_dir", "name", "out", "tensorboard", "timeout_s", "stall_timeout_s",
        "collective_timeout_s", "env", "load_optimizer", "log_interval", "instruments", "torch_profile_mode"}
