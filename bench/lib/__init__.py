"""What the benchmarks share: one owner for each fact that more than one script needs.

Nothing here imports tests/: a benchmark runs from a carried copy of the tree on a
machine without the test suite's dependencies (bench/recipes/GPU.md).
"""
