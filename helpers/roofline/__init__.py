"""The name lesson 04 reads the roofline's links by (`from helpers.roofline import hardware`): the
roofline model and its links are helpers/perf/'s (roofline.py, links.py)."""
