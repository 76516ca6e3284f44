"""The one contract between the two sides: the run directory. names.py (every file name once),
reader.py (RunDir, notebook side), writer.py (metrics, heartbeats, errors, atomic JSON; worker
side), checkpoint_dir.py (checkpoint folders on disk: latest, verify, describe). No torch."""
