"""How an exercise speaks (helpers/views/exercises.py says what the exercises are): `judge` compares
an answer with the truth and records the verdict under the calling check's name; `tell` shows it (a
sentence for the learner, a record under VERDICT_MIME for the test suite); `verdicts` reads them back
from an executed notebook; `shown` and `reveal` keep answers hidden until an attempt."""
from __future__ import annotations

import sys

VERDICT_MIME = "application/vnd.kit.exercise-verdict+json"


def tell(exercise: str, verdict: str, sentence: str) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
        if get_ipython() is not None:
            display({"text/plain": sentence, VERDICT_MIME: {"exercise": exercise, "verdict": verdict}}, raw=True)
            return
    except ImportError:
        pass
    print(sentence)


def verdicts(notebook) -> list[tuple[int, str, str]]:
    """(cell index, exercise, verdict) of every check an executed notebook (an nbformat node) ran, in
    order; a verdict is "correct", "not yet" or "not answered"."""
    return [(i, o["data"][VERDICT_MIME]["exercise"], o["data"][VERDICT_MIME]["verdict"])
            for i, cell in enumerate(notebook.cells) for o in cell.get("outputs", [])
            if VERDICT_MIME in o.get("data", {})]


def shown(exercise: str, passed: bool, show_answers=False) -> bool:
    """Whether the answer of `exercise` (the parameter a learner writes it into) may be shown now: its
    check passed, or the learner asked for it (`show_answers`, a parameter of the lesson: True for
    every exercise of the lesson, or the names of some). Otherwise says how to see it and returns
    False, so that a cell prints an answer, or anything that gives it away, under `if shown(...)`."""
    if isinstance(show_answers, str):
        show_answers = [show_answers]
    if passed or show_answers is True or (show_answers and exercise in show_answers):
        return True
    print(f"{exercise}: the answer and what follows from it show here once your answer is right, or when you "
          f'ask for it: show_answers = ["{exercise}"] (or True) in the parameters cell, then run again')
    return False


def reveal(exercise: str, passed: bool, show_answers, markdown: str) -> bool:
    """`markdown`, the answer of `exercise` and why, shown when `shown` says it may be (as Markdown in
    a notebook, printed elsewhere); returns whether it was."""
    if not shown(exercise, passed, show_answers):
        return False
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
        if get_ipython() is not None:
            display(Markdown(markdown))
            return True
    except ImportError:
        pass
    print(markdown)
    return True


def judge(answer, truth, hint: str, rel: float = 0.0, shown=None) -> bool:
    """`shown`: the learner's answer as written, when `answer` is a normalised form of it. The
    verdict is recorded under the name of the check that called this."""
    exercise = sys._getframe(1).f_code.co_name
    if answer is None:
        tell(exercise, "not answered", "not answered yet: write your answer in the parameters cell at the top "
              "and run the notebook again (a hint comes with a wrong answer)")
        return False
    ok = abs(float(answer) - truth) <= rel * abs(truth) if rel else answer == truth
    shown = answer if shown is None else shown
    if not ok:
        tell(exercise, "not yet", f"not yet: {shown!r} is not it. {hint}")
        return False
    tell(exercise, "correct", f"correct: {shown!r}")
    return True
