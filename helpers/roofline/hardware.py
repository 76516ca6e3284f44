"""`hardware.LINKS`, as lesson 04 reads it: helpers/perf/links.py's named links."""
from helpers.perf.links import LINKS

__all__ = ["LINKS"]
