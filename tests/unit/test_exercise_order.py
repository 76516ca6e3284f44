"""No lesson shows an exercise's answer before the learner tried it. For every exercise (a cell that
calls `exercises.check_<name>(param, ...)`) no cell before it, source or stored output, holds its
answer, and neither does its own source (its hint); the answers are the right ones the notebook
suite passes (tests/notebooks/test_notebooks.py ANSWERS, read from that file's source without
importing the notebook suite), searched in the forms tests/exercise_answers.py chooses per type.

Two more rules cover what that search cannot: a flag answer is named in no cell's source at all (a
learner reads every cell's source whether it ran or not: the lesson prints the flags from the job's
record, under `exercises.reveal`); and what gives away an answer the search skips (11's ranking of the
layouts, 20's first ranks, 13's endings, 04's bars, 06's schedule, 19's launch lines and diagnoses)
is printed only after the check, inside an `if` on `exercises.shown(...)`."""
import ast
import json
import re
from pathlib import Path

import pytest

from tests import exercise_answers as answers_in

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# What prints an answer the text search skips: (the parameter, a line of the cell that prints it).
GIVEAWAYS = {
    "04_tensor_parallel": [("tp_time_ratio", "display(fig)")],
    "06_pipeline_parallel": [("pp_bubble", "schedule.plot_ideal(4, 12)")],
    "11_choose_a_layout": [("my_layout", "print(table(advice, top=12))")],
    "13_failure_modes": [("ends_by_timeout", 'print(f"{k}  {f}: ended {endings[f][1]}')],
    "19_data_launch_logs": [("node_commands", 'print("SLURM: srun --nodes 2 --ntasks-per-node 1 torchrun'),
                            ("log_diagnosis", 'print(f"{k}  {truth[k]}: {found[k][2]}")')],
    "20_capstone": [("megatron_command", "print(table(advice, top=TOP))")],
}
GATES = ("shown", "reveal")


def answers() -> dict:
    """ANSWERS of tests/notebooks/test_notebooks.py: literals and arithmetic, evaluated without builtins."""
    tree = ast.parse((ROOT / "tests" / "notebooks" / "test_notebooks.py").read_text())
    value = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "ANSWERS" for t in node.targets))
    return eval(compile(ast.Expression(value), "ANSWERS", "eval"), {"__builtins__": {}})


def cells_of(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def flags_named(cells: list[dict], lesson_answers: dict) -> list[str]:
    """Where a cell's source names a flag of a flags answer (anywhere in the lesson)."""
    flags = {param: given for param, given in lesson_answers.items()
             if isinstance(given, str) and given.startswith("--")}
    return answers_in.named_in_source(cells, flags)


def _code(cell: dict) -> str:
    text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("%", "!")))


def _is_gate(test: ast.expr, gate_names: set[str]) -> bool:
    """An `if` test that holds only once the answer may show: a call to exercises.shown/reveal (or to
    the check itself, true once the answer is right), or a name an earlier line set from one."""
    for node in ast.walk(test):
        called = getattr(node.func, "attr", getattr(node.func, "id", "")) if isinstance(node, ast.Call) else ""
        if called in GATES or called.startswith("check_"):
            return True
        if isinstance(node, ast.Name) and node.id in gate_names:
            return True
    return False


def ungated(cells: list[dict], giveaways: list[tuple[str, str]]) -> list[str]:
    """Each giveaway line (see GIVEAWAYS) that runs before its exercise's check, or outside an `if` on
    `exercises.shown`/`reveal`."""
    checks = answers_in.exercise_cells(cells)
    gate_names: set[str] = set()
    found = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        tree = ast.parse(_code(cell))
        for node in ast.walk(tree):  # names that hold a gate's verdict, for later cells too
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _is_gate(node.value, set()):
                gate_names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        lines = _code(cell).splitlines()
        for param, snippet in giveaways:
            for n, line in enumerate(lines, start=1):
                if snippet not in line:
                    continue
                inside = any(isinstance(node, ast.If) and _is_gate(node.test, gate_names)
                             and node.body[0].lineno <= n <= node.body[-1].end_lineno for node in ast.walk(tree))
                if i < checks.get(param, len(cells)) or not inside:
                    found.append(f"{param}: cell {i}: {snippet}")
    missing = [s for _, s in giveaways if not any(s in _code(c) for c in cells if c["cell_type"] == "code")]
    assert not missing, f"GIVEAWAYS names lines no cell holds: {missing}"
    return found


LESSONS = [p for p in NOTEBOOKS if p.stem in answers()]


def test_every_answer_has_its_lesson_and_every_exercise_its_answer():
    given = answers()
    assert given and {p.stem for p in LESSONS} == set(given), (sorted(given), [p.stem for p in LESSONS])
    for lesson in LESSONS:
        asked = set(answers_in.exercise_cells(cells_of(lesson)))
        assert asked == set(given[lesson.stem]), (lesson.name, sorted(asked), sorted(given[lesson.stem]))


def test_the_searched_answer_types_are_the_recognisable_ones():
    searched = {(stem, param) for stem, given in answers().items() for param, a in given.items()
                if answers_in.forms(a)}
    assert {("03_data_parallel", "dist_opt_flags"), ("03_data_parallel", "dp_wire_formula"),
            ("07_context_parallel", "kv_gather_bytes"),
            ("09_process_groups_5d", "ep_group_tp4"), ("12_checkpoints", "checkpoint_bytes"),
            ("14_smoke_test_cpt_sft", "replica_groups")} <= searched, sorted(searched)
    flags = {(stem, p) for stem, given in answers().items() for p, a in given.items() if p.endswith("_flags")}
    chained = {(stem, p) for stem in answers() for p in answers_in.decisions(cells_of(ROOT / "notebooks" / f"{stem}.ipynb"))}
    assert chained == {("03_data_parallel", "your_dp4_flags"), ("05_sequence_parallel", "your_fit_flags"),
                       ("06_pipeline_parallel", "your_pp_flags")}, chained
    assert len(flags - chained) == 6 and flags - chained <= searched
    assert ("15_hf_import", "fc1_rows_tp2") not in searched  # 160: the FFN width the question gives


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_no_cell_before_an_exercise_holds_its_answer(lesson):
    cells = cells_of(lesson)
    found = answers_in.shown_before_asked(cells, answers()[lesson.stem])
    assert not found, f"{lesson.name} shows an answer before its exercise asks for it: {found}"
    named = flags_named(cells, answers()[lesson.stem])
    assert not named, f"{lesson.name} names a flag answer in a cell's source (print it from the record): {named}"
    late = ungated(cells, GIVEAWAYS.get(lesson.stem, []))
    assert not late, f"{lesson.name} prints what gives an answer away before its check or ungated: {late}"


# ---- the rules find what they look for -------------------------------------------------------------
def cell(kind, source, outputs=()):
    return {"cell_type": kind, "source": source, **({"outputs": list(outputs)} if kind == "code" else {})}


OLD_FLAG_CELL = ("## What this job asked of Megatron\nThe distributed optimizer is one switch in two of "
                 "Megatron's configs. Megatron-LM: `--use-distributed-optimizer`.")


def test_a_copy_of_03_with_the_flag_cell_moved_back_fails(tmp_path):
    lesson = ROOT / "notebooks" / "03_data_parallel.ipynb"
    nb = json.loads(lesson.read_text())
    given = answers()["03_data_parallel"]
    at = answers_in.exercise_cells(nb["cells"])["dist_opt_flags"]
    assert answers_in.shown_before_asked(nb["cells"], given) == []
    nb["cells"].insert(at, cell("markdown", OLD_FLAG_CELL))  # the flag cell, back above the exercise
    copy = tmp_path / lesson.name
    copy.write_text(json.dumps(nb))
    with pytest.raises(AssertionError, match=rf"dist_opt_flags: cell {at} source: --use-distributed-optimizer"):
        test_no_cell_before_an_exercise_holds_its_answer(copy)  # the lesson's own test, on the copy


def test_a_stored_output_that_prints_the_answer_before_the_check_is_found():
    given = {"dist_opt_flags": "--use-distributed-optimizer", "checkpoint_bytes": 3_159_552}
    ask = cell("code", "ok = exercises.check_megatron_flags(dist_opt_flags, base, job, rtol, hint='h')\n"
                       "ok2 = exercises.check_checkpoint_bytes(checkpoint_bytes, measured, params)")
    printed = cell("code", "megatron_calls.show(asked)",
                   [{"output_type": "stream", "name": "stdout", "text": ["--use-distributed-optimizer \\\n"]}])
    table = cell("code", "print(total)", [{"output_type": "execute_result", "data": {
        "text/plain": "3,159,552 B", "image/png": "iVBOR3159552"}}])
    assert answers_in.shown_before_asked([printed, table, ask], given) == [
        "dist_opt_flags: cell 0 output: --use-distributed-optimizer", "checkpoint_bytes: cell 1 output: 3,159,552"]
    assert answers_in.shown_before_asked([ask, printed, table], given) == []  # after the attempt: a reveal
    assert answers_in.shown_before_asked([cell("markdown", "--use-distributed-optimizer-foo, 13,159,552"), ask],
                                         given) == []  # another flag, another number


def test_a_formula_is_found_in_its_parts_and_small_numbers_are_not_searched():
    given = {"dp_wire_formula": "(n - 1) / n * (grad + grad // 4 * elem)", "tp_all_reduces": 34}
    ask = cell("code", "exercises.check_dp_wire_bytes(dp_wire_formula, n, grad, elem, measured)\n"
                       "exercises.check_tp_all_reduces(tp_all_reduces, 34)")
    told = cell("markdown", "on a ring a rank sends 2(n−1)/n of the buffer")
    assert answers_in.shown_before_asked([told, ask], given) == ["dp_wire_formula: cell 0 source: (n-1)/n"]
    assert answers_in.shown_before_asked([cell("markdown", "34 all-reduces"), ask], given) == []


def test_a_flag_named_after_the_exercise_is_found_and_a_printed_one_is_not():
    given = {"sp_flags": "--sequence-parallel"}
    ask = cell("code", "same_job = exercises.check_megatron_flags(sp_flags, base_flags, sp_run, rtol, hint='...')")
    told = cell("markdown", "Megatron-LM: `--sequence-parallel`.")
    revealed = cell("code", 'exercises.reveal("sp_flags", same_job, show_answers, "Megatron-LM: " + ", ".join(added))',
                    [{"output_type": "display_data", "data": {"text/markdown": "Megatron-LM: `--sequence-parallel`"}}])
    assert flags_named([ask, told], given) == ["sp_flags: cell 1: --sequence-parallel"]
    assert flags_named([ask, revealed], given) == []


def test_a_giveaway_printed_before_its_check_or_ungated_is_found():
    giveaways = [("fastest_layout", "print(table(advice, top=12))")]
    ask = cell("code", "passed = exercises.check_fastest_layout(fastest_layout, steps)")
    gated = cell("code", 'if exercises.shown("fastest_layout", passed, show_answers):\n'
                         "    print(table(advice, top=12))")
    by_name = [cell("code", 'ok = exercises.shown("fastest_layout", passed, show_answers)'),
               cell("code", "if ok:\n    print(table(advice, top=12))")]
    plain = cell("code", "print(table(advice, top=12))")
    assert ungated([ask, gated], giveaways) == []
    assert ungated([ask, *by_name], giveaways) == []
    assert ungated([ask, plain], giveaways) == ["fastest_layout: cell 1: print(table(advice, top=12))"]
    assert ungated([gated, ask], giveaways) == ["fastest_layout: cell 0: print(table(advice, top=12))"]


def test_each_lesson_that_gates_an_answer_lets_the_learner_ask_for_it():
    for lesson in LESSONS:
        cells = cells_of(lesson)
        text = "\n".join(_code(c) for c in cells if c["cell_type"] == "code")
        if not re.search(r"exercises\.(shown|reveal)\(", text):
            continue
        parameters = next(_code(c) for c in cells if "parameters" in c.get("metadata", {}).get("tags", []))
        assert re.search(r"^show_answers = False\b", parameters, flags=re.M), \
            f"{lesson.name} gates an answer but its parameters cell has no `show_answers = False`"
