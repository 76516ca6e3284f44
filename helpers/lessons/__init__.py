"""Notebook side, the lessons run headless: each one top to bottom in a papermill process of its own,
its executed copy written out. The command line, the notebook tests (`make test`) and so the pages
`make site` builds from their executed copies all go through runner.py's `run_lesson`:

    python -m helpers.lessons run notebooks/00_quickstart.ipynb [--out FILE] [-p NAME VALUE ...] [--device cpu]

    from helpers.lessons.runner import run_lesson
    run_lesson(Path("notebooks/02_memory.ipynb"), Path("executed.ipynb"), {"llama_dp8_fits": [False, True]}, "cpu")

runner.py starts the process, papermill_cli.py is what runs in it (papermill's command line, its kernel
client's waits polled in steps), parameters.py reads a lesson's parameters cell and the command
line's values, cli.py is the command line. Needs papermill, the `lessons` extra of pyproject.toml:
`pip install -e '.[lessons]'`; nothing here imports it but the process runner.py starts."""
