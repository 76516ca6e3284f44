"""What the lessons say about Megatron, checked against Megatron's own code: the DDP defaults they
name, Megatron-LM's activation formula and when it prints it, how many microbatches 1F1B keeps in
flight on each stage, how many all-to-alls the alltoall dispatcher makes per MoE layer, and that
each lesson a prerequisite line names by number is the lesson on that topic."""
import ast
import importlib.util
import json
import math
import re
import typing
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = {p.name[:2]: p for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))}
MEGATRON = Path(importlib.util.find_spec("megatron.core").origin).parent.parent  # core/ and training/
NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


@lru_cache(maxsize=None)
def markdown_cells(number: str) -> tuple[str, ...]:
    cells = json.loads(NOTEBOOKS[number].read_text())["cells"]
    return tuple(" ".join("".join(c["source"]).split()) for c in cells if c["cell_type"] == "markdown")


def lesson_text(number: str) -> str:
    return "\n".join(markdown_cells(number))


def title(number: str) -> str:
    return markdown_cells(number)[0].split(" **Assumes:**")[0]


def function_defs(path: Path) -> dict[str, ast.FunctionDef]:
    """Every function and method of a source file, by name (methods as Class.method)."""
    tree = ast.parse(path.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            out.update({f"{node.name}.{f.name}": f for f in node.body if isinstance(f, ast.FunctionDef)})
    return out


def calls_to(node: ast.AST, name: str) -> int:
    return sum(isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == name
               for n in ast.walk(node))


def megatron_function(relative: str, name: str, **names):
    """One top-level function of the installed Megatron, compiled from its source on its own with the
    few module names it reads: importing megatron.core costs about 7 s of CPU (torch and the whole
    package), and the functions read here are arithmetic on their arguments."""
    path = MEGATRON / relative
    node = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace = dict(names)
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


# ---- DistributedDataParallelConfig's defaults --------------------------------------------------
def ddp_defaults() -> SimpleNamespace:
    """DistributedDataParallelConfig's field defaults, read from its dataclass."""
    tree = ast.parse((MEGATRON / "core" / "distributed" / "distributed_data_parallel_config.py").read_text())
    config = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DistributedDataParallelConfig")
    return SimpleNamespace(**{f.target.id: f.value.value for f in config.body
                              if isinstance(f, ast.AnnAssign) and isinstance(f.value, ast.Constant)})


def test_lessons_give_megatron_cores_overlap_grad_reduce_default():
    default = ddp_defaults().overlap_grad_reduce
    said = {False: ("defaults to `False`", "off by default in Megatron-Core"),
            True: ("defaults to `True`", "on by default in Megatron-Core")}[default]
    stating = [(n, t) for n in NOTEBOOKS for t in markdown_cells(n)
               if "overlap_grad_reduce" in t and re.search(r"by default|defaults to", t)]
    assert {n for n, _ in stating} >= {"03", "09"}, [n for n, _ in stating]
    wrong = [f"{n}: ...{t[max(0, m.start() - 120):m.end() + 40]}..." for n, t in stating
             if not any(s in t for s in said) for m in [re.search(r"by default|defaults to", t)]]
    assert not wrong, f"Megatron-Core's overlap_grad_reduce defaults to {default}; say so:\n" + "\n".join(wrong)


def test_lesson_20_says_who_turns_fp32_gradient_reduction_on():
    assert ddp_defaults().grad_reduce_in_fp32 is False
    # Megatron-LM's validate_args sets accumulate_allreduce_grads_in_fp32 (its name for Core's
    # grad_reduce_in_fp32) inside `if args.bf16:`.
    validate = function_defs(MEGATRON / "training" / "arguments.py")["validate_args"]
    bf16 = [n for n in ast.walk(validate) if isinstance(n, ast.If) and ast.unparse(n.test) == "args.bf16"]
    assert bf16 and any(isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "args.accumulate_allreduce_grads_in_fp32"
                        and ast.unparse(n.value) == "True" for n in ast.walk(bf16[0]))
    text = lesson_text("20")
    assert "`grad_reduce_in_fp32` defaults to `False`" in text
    assert "`validate_args` turns it on for `--bf16`" in text and "`accumulate_allreduce_grads_in_fp32`" in text
    everywhere = "\n".join(lesson_text(n) for n in NOTEBOOKS)
    assert not re.search(r"Megatron-Core reduces them in fp32", everywhere)


# ---- Megatron-LM's activation estimate ---------------------------------------------------------
def megatron_layer_bytes_per_token_and_hidden(model, lay) -> float:
    """What Megatron-LM's SP formula adds for one more layer, per token and hidden unit."""
    from helpers.memory import Training
    from helpers.memory.vs_megatron import megatron_args

    estimate = megatron_function("training/theoretical_memory_usage.py", "compute_activation_memory", math=math,
                                 NUM_BYTES_IN_MEGABYTE=2**20)
    args = megatron_args(model, lay, Training(recompute="selective"))
    one, two = (estimate(SimpleNamespace(**{**vars(args), "num_layers": n}), num_microbatches=1) for n in (1, 2))
    return (two - one) / (lay.seq_len * lay.micro_batch * model.hidden_size)


def test_lesson_10_gives_megatrons_activation_formula():
    from helpers.job import models
    from helpers.job.layout import Layout

    llama = models.preset("llama3-8b")
    assert (llama.hidden_size, llama.ffn_hidden_size) == (4096, 14336)
    per_unit = megatron_layer_bytes_per_token_and_hidden(llama, Layout(seq_len=4096))
    assert per_unit == 18 + 4 * llama.ffn_hidden_size / llama.hidden_size == 32
    assert megatron_layer_bytes_per_token_and_hidden(llama, Layout(tp=2, sp=True, nproc=2, seq_len=4096)) == 16
    text = lesson_text("10")
    assert "(18 + 4F/h)/TP bytes per token and hidden unit with SP" in text
    assert "32/TP for Llama-3-8B" in text
    assert "34/TP" not in text


def test_lesson_10_says_when_megatron_lm_prints_its_estimate():
    training = function_defs(MEGATRON / "training" / "training.py")
    printing = sorted(name for name, f in training.items() if calls_to(f, "report_theoretical_memory"))
    assert printing == ["training_log"], printing
    text = lesson_text("10")
    assert "`training_log` calls `report_theoretical_memory`" in text and "with the first iteration" in text
    assert not re.search(r"prints `theoretical_memory_usage` at start-up", text)


# ---- 1F1B: microbatches in flight ---------------------------------------------------------------
@lru_cache(maxsize=None)
def get_pp_rank_microbatches():
    return megatron_function("core/pipeline_parallel/schedules.py", "get_pp_rank_microbatches",
                             Optional=typing.Optional, P2PCommunicator=object)


def megatron_in_flight(p: int, stage: int, m: int, v: int = 1) -> int:
    """Megatron's warm-up forwards on `stage`, plus the steady phase's first forward when one is left."""
    # It asks the communicator only for the pipeline size, the stage and the VPP size.
    p2p = SimpleNamespace(pp_group=SimpleNamespace(size=lambda: p, rank=lambda: stage),
                          virtual_pipeline_model_parallel_size=v if v > 1 else None)
    _, _, warmup, remaining = get_pp_rank_microbatches()(m, v, p, p2p_communicator=p2p)
    return warmup + (1 if remaining else 0)


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_1f1b_keeps_p_minus_r_microbatches_in_flight(p):
    from helpers.job.layout import Layout
    from helpers.memory.activations import in_flight

    for m in range(1, 2 * p + 2):
        for stage in range(p):
            megatron = megatron_in_flight(p, stage, m)
            assert megatron == min(p - stage, m), (p, m, stage, megatron)
            assert in_flight(Layout(pp=p, nproc=p, global_batch=m), stage) == megatron, (p, m, stage)
    for m in (2 * p, 3 * p):  # interleaved, microbatches a multiple of p as Megatron requires
        for stage in range(p):
            assert in_flight(Layout(pp=p, vpp=2, nproc=p, global_batch=m), stage) == megatron_in_flight(p, stage, m, 2)


def test_lesson_11_says_pp_leaves_the_first_stages_activations():
    # stage 0 keeps p microbatches of L/p layers: the layers of one microbatch of the whole model
    p, layers = 4, 32
    assert megatron_in_flight(p, 0, m=8) * (layers // p) == layers
    text = lesson_text("11")
    assert "most activations" not in text and "divides *everything*" not in text
    assert "It does not divide the first stage's activations" in text
    assert "stage *r* of *p* keeps *p − r* microbatches in flight" in text
    assert "*p − r − 1* warm-up forwards" in text
    assert "`PP − p` microbatches" in lesson_text("02") and "*p − s* microbatches' activations" in lesson_text("06")


def test_lesson_16_compares_plans_at_one_global_batch():
    cells = [c for c in json.loads(NOTEBOOKS["16"].read_text())["cells"] if c["cell_type"] == "code"]
    plans = next("".join(c["source"]) for c in cells if "plans = {" in "".join(c["source"]))
    layouts = re.findall(r"Layout\(([^)]*)\)", plans)
    assert len(layouts) == 2 and all("global_batch=GLOBAL_BATCH" in lay for lay in layouts), layouts
    text = lesson_text("16")
    assert "the same global batch of 64 sequences for both plans" in text
    assert "It does not halve the activations" in text and "halves all the rest" not in text


# ---- MoE all-to-alls ----------------------------------------------------------------------------
def test_lessons_08_and_11_count_the_alltoall_dispatchers_all_to_alls():
    path = MEGATRON / "core" / "transformer" / "moe" / "token_dispatcher.py"
    methods = function_defs(path)
    forward = sum(calls_to(methods[f"MoEAlltoAllTokenDispatcher.{m}"], "all_to_all")
                  for m in ("token_dispatch", "token_combine"))
    assert forward == 3  # tokens and their probabilities out, the expert outputs back
    said = {}
    for n in NOTEBOOKS:
        for word in re.findall(r"(\w+) all-to-alls per MoE layer", lesson_text(n)):
            said.setdefault(n, set()).add(NUMBER_WORDS.get(word.lower(), word))
    assert set(said) >= {"08", "11"}, said
    assert all(counts == {forward} for counts in said.values()), said
    for n in ("08", "11"):
        assert re.search(r"three all-to-alls per MoE layer and microbatch forward .{0,120}the same three backward",
                         lesson_text(n)), n


# ---- cross-references by number ----------------------------------------------------------------
# A topic named before a lesson number in parentheses, and a word the title of that lesson holds.
TOPICS = [
    (r"checkpoints", "Checkpoints"),
    (r"the quickstart|the runner(?: and run directory)?", "Quickstart"),
    (r"memory terms|the memory planner|optimizer state", "Memory"),
    (r"\bDP|the DP gradient all-reduce|data parallel", "Data parallel"),
    (r"\bTP|tensor parallel", "Tensor parallel"),
    (r"\bSP", "Sequence parallel"),
    (r"\bPP", "Pipeline parallel"),
    (r"\bCP", "Context parallel"),
    (r"EP/ETP/EDP", "EP, ETP and EDP"),
    (r"rank grids|layouts and rank grids", "Process groups"),
    (r"layout lab|lab", "Layout lab"),
]


def test_numbered_references_point_to_the_lesson_on_that_topic():
    checked, wrong = [], []
    for n in NOTEBOOKS:
        text = lesson_text(n)
        for pattern, word in TOPICS:
            for ref in re.findall(rf"(?:{pattern}) \((\d\d)\)", text):
                checked.append((n, word, ref))
                if ref not in NOTEBOOKS or word not in title(ref):
                    wrong.append(f"{n}: '{word}' ({ref}) is {title(ref) if ref in NOTEBOOKS else 'no lesson'}")
    assert not wrong, "\n".join(wrong)
    assert sum(word == "Checkpoints" for _, word, _ in checked) >= 2 and len(checked) >= 20, checked
    assert "Checkpoints" in title("12")
