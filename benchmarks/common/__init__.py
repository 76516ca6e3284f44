"""Shared tools of the benchmarks: GPU clock/power sampling, a text folder as a WikiText-layout corpus."""
