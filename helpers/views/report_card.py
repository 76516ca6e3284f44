"""The smoke-test report card on the notebook side: read a run's report.json and show its eight
checks as a table (HTML in a notebook, plain text elsewhere: helpers/rundir/report_text.py). The checks and their evidence are
written by the workers (helpers/runtime/measure/report_card.py)."""
from __future__ import annotations

import html

from helpers.rundir.reader import RunDir
from helpers.rundir.report_text import MARK, evidence_text, rows, text  # noqa: F401  (the card's text form)

COLOR = {"pass": "#1a7f37", "fail": "#cf222e", "skipped": "#6e7781"}


def load(run) -> dict:
    """The report of a RunDir (or a run directory path); a clear error when there is none."""
    run = run if isinstance(run, RunDir) else RunDir(run)
    report = run.report
    if report is None:
        raise FileNotFoundError(f"{run.path} has no report.json (the job did not reach its process groups)")
    return report


def to_html(report: dict) -> str:
    cells = "".join(
        f"<tr><td style='text-align:left'>{html.escape(t)}</td>"
        f"<td style='color:{COLOR[s]};font-weight:bold'>{MARK[s]}</td>"
        f"<td style='text-align:left;font-family:monospace;font-size:85%'>{html.escape(e)}</td></tr>"
        for t, s, e in rows(report))
    verdict = "PASSED" if report["passed"] else "FAILED"
    return (f"<p><b>Smoke-test report card</b>: layout <code>{html.escape(report['layout'])}</code>, "
            f"data <code>{html.escape(report['data'])}</code>: <b>{verdict}</b> {report['summary']}</p>"
            f"<table><tr><th>check</th><th>status</th><th>evidence</th></tr>{cells}</table>")


def show(run) -> dict:
    """Display the card (HTML in Jupyter, text otherwise) and return the report."""
    report = load(run)
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display
        if get_ipython() is not None:
            display(HTML(to_html(report)))
            return report
    except ImportError:
        pass
    print(text(report))
    return report
