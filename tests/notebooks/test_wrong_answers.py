"""A learner's wrong answer does not stop a lesson: "Run All" reaches the end, and each exercise
says "not yet" with its hint. Run on the cheapest lesson with an exercise (02, about 10 s), with
every answer wrong."""
from pathlib import Path

import nbformat

from helpers.lessons.runner import run_lesson
from helpers.views.exercises import VERDICT_MIME, verdicts

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "notebooks" / "02_memory.ipynb"
WRONG = {"llama_dp8_fits": [True, True]}  # the right one: [False, True] (tests/notebooks/test_notebooks.py)


def test_run_all_goes_on_past_wrong_answers():
    executed = ROOT / "tests" / ".executed" / "wrong-answers" / LESSON.name
    out = run_lesson(LESSON, executed, WRONG, device="cpu", capture=True)
    assert out.returncode == 0, f"{LESSON.name} stopped at a wrong answer (executed copy: {executed}):\n" \
                                f"{out.stderr[-4000:]}"
    nb = nbformat.read(executed, as_version=4)
    assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code" and c.source.strip()), \
        "a code cell did not run"
    said = verdicts(nb)
    assert [verdict for _, _, verdict in said] == ["not yet"] * len(WRONG), said
    for cell, exercise, _ in said:
        sentences = [o["data"]["text/plain"] for o in nb.cells[cell].outputs if VERDICT_MIME in o.get("data", {})]
        assert len(sentences) == 1 and sentences[0].startswith("not yet: ") and \
            sentences[0].split(" is not it. ", 1)[1].strip(), (exercise, sentences)  # the hint follows
