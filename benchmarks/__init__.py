"""Scripts that measure the kit, by purpose (benchmarks/README.md). Run each from the repository root as a
module, `python -m benchmarks.<folder>.<script>`, so that `helpers` and `benchmarks` import without a path prelude."""
