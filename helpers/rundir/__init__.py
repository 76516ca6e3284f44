"""The one contract between the two sides: the run directory. names.py (every file name once),
reader.py (RunDir, notebook side), writer.py (metrics, heartbeats, errors, atomic JSON; worker
side), report_text.py (the report card as text). No torch."""
