"""The one contract between the two sides: the run directory. names.py (every file name once),
reader.py (RunDir, notebook side), writer.py (metrics, heartbeats, errors, atomic JSON; worker
side), prepared.py (model.json and data.json: the model and the data source as worked out before
start, for the workers), report_text.py (the report card as text). No torch."""
