"""A learner's wrong answer does not stop a lesson: "Run All" reaches the end, each exercise says
"not yet" with its hint, and what would give the answer away stays hidden: the cell says how to see
it instead (`exercises.shown`). Run on the cheapest lesson with an exercise (02, about 10 s) and on
the layout lesson, whose ranking names the answer (11), with every answer wrong."""
import re
from pathlib import Path

import nbformat
import pytest

from helpers.lessons.runner import run_lesson
from helpers.views.exercises import VERDICT_MIME, verdicts

ROOT = Path(__file__).resolve().parents[2]
# The wrong answers, and what the executed copy must not show (the right ones: tests/notebooks/test_notebooks.py).
WRONG = {
    "02_memory": ({"llama_dp8_fits": [True, True]}, None),  # right: [False, True]
    # right: EP8, micro batch 2, the distributed optimizer; what must not show: the advisor's table of its layouts
    "11_choose_a_layout": ({"my_layout": {"tp": 2, "sp": True, "ep": 2, "etp": 1, "dist_opt": True}},
                           r"(?m)^deepseek-v2-lite on 8 x "),
}
HIDDEN = "the answer and what follows from it show here once your answer is right"


def output_text(cell) -> str:
    return "\n".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.get("outputs", []))


@pytest.mark.parametrize("stem", WRONG)
def test_run_all_goes_on_past_wrong_answers(stem):
    lesson = ROOT / "notebooks" / f"{stem}.ipynb"
    wrong, never = WRONG[stem]
    executed = ROOT / "tests" / ".executed" / "wrong-answers" / lesson.name
    out = run_lesson(lesson, executed, wrong, device="cpu", capture=True)
    assert out.returncode == 0, f"{lesson.name} stopped at a wrong answer (executed copy: {executed}):\n" \
                                f"{out.stderr[-4000:]}"
    nb = nbformat.read(executed, as_version=4)
    assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code" and c.source.strip()), \
        "a code cell did not run"
    said = verdicts(nb)
    assert [verdict for _, _, verdict in said] == ["not yet"] * len(wrong), said
    for cell, exercise, _ in said:
        sentences = [o["data"]["text/plain"] for o in nb.cells[cell].outputs if VERDICT_MIME in o.get("data", {})]
        assert len(sentences) == 1 and sentences[0].startswith("not yet: ") and \
            sentences[0].split(" is not it. ", 1)[1].strip(), (exercise, sentences)  # the hint follows
    text = "\n".join(output_text(c) for c in nb.cells if c.cell_type == "code")
    gated = sum(len(re.findall(r"exercises\.(?:shown|reveal)\(", c.source)) for c in nb.cells if c.cell_type == "code")
    assert text.count(HIDDEN) == gated, (text.count(HIDDEN), gated)  # each gate says how to see its answer
    assert never is None or not re.search(never, text), f"{lesson.name} showed the answer after a wrong one"
