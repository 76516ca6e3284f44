"""A lesson's "Write the flags" exercise asks before it shows: no cell before the one that calls
`exercises.check_megatron_flags` names a flag of the right answer (its source or any stored
output), and neither does that cell's own source (its hint). The lesson's "What this job asked of
Megatron" section prints the job's Megatron-LM command, so it has to come after the exercise. The
right answers are those the notebook suite passes (tests/notebooks/test_notebooks.py ANSWERS), read
from that file's source, without importing the notebook suite."""
import ast
import json
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CHECK = "check_megatron_flags"


def answers() -> dict:
    """ANSWERS of tests/notebooks/test_notebooks.py: literals and arithmetic, evaluated without builtins."""
    tree = ast.parse((ROOT / "tests" / "notebooks" / "test_notebooks.py").read_text())
    value = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "ANSWERS" for t in node.targets))
    return eval(compile(ast.Expression(value), "ANSWERS", "eval"), {"__builtins__": {}})


def flags_call(source: str) -> ast.Call | None:
    """The `check_megatron_flags(...)` call in a code cell's source, if it makes one."""
    if CHECK not in source:
        return None
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, ast.Call) and CHECK in (getattr(node.func, "attr", None), getattr(node.func, "id", None)):
            return node
    return None


def shown_before_asked(cells: list[dict], lesson_answers: dict) -> list[str]:
    """Where a cell up to the flags exercise names a flag of its answer: "cell i: --flag" for each
    (the exercise's own outputs left out: they print the answer once it is given)."""
    at, call = next(((i, call) for i, c in enumerate(cells) if c["cell_type"] == "code"
                     and (call := flags_call("".join(c["source"]))) is not None), (None, None))
    assert call is not None, f"no cell calls {CHECK}"
    assert isinstance(call.args[0], ast.Name), f"{CHECK}'s first argument must be the parameter holding the answer"
    answer = lesson_answers[call.args[0].id]
    flags = [word for word in shlex.split(answer) if word.startswith("--")]
    assert flags, f"the answer {answer!r} names no flag"
    found = []
    for i, cell in enumerate(cells[:at + 1]):
        text = "".join(cell["source"]) + ("" if i == at else json.dumps(cell.get("outputs", [])))
        found += [f"cell {i}: {flag}" for flag in flags if flag in text]
    return found


LESSONS = [p for p in NOTEBOOKS if any(c["cell_type"] == "code" and flags_call("".join(c["source"]))
                                       for c in json.loads(p.read_text())["cells"])]


def test_every_flags_answer_has_its_lesson():
    flag_answers = {stem for stem, given in answers().items() if any(name.endswith("_flags") for name in given)}
    assert flag_answers, "ANSWERS holds no *_flags answer"
    assert flag_answers == {p.stem for p in LESSONS}, (sorted(flag_answers), [p.stem for p in LESSONS])


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_write_the_flags_asks_before_the_lesson_shows_the_flag(lesson):
    found = shown_before_asked(json.loads(lesson.read_text())["cells"], answers()[lesson.stem])
    assert not found, f"{lesson.name} names the answer before its 'Write the flags' exercise asks for it: {found}"


def test_a_flag_named_before_the_exercise_is_found():
    def cell(kind, source):
        return {"cell_type": kind, "source": source, **({"outputs": []} if kind == "code" else {})}

    ask = cell("code", "same_job = exercises.check_megatron_flags(sp_flags, base_flags, sp_run, rtol, hint='...')")
    told = cell("markdown", "Megatron-LM: `--sequence-parallel`.")
    printed = {**cell("code", "megatron_calls.show(asked)"),
               "outputs": [{"output_type": "stream", "name": "stdout", "text": "--sequence-parallel \\\n"}]}
    given = {"sp_flags": "--sequence-parallel"}
    assert shown_before_asked([told, ask], given) == ["cell 0: --sequence-parallel"]
    assert shown_before_asked([printed, ask], given) == ["cell 0: --sequence-parallel"]
    assert shown_before_asked([ask, told, printed], given) == []
