"""Benchmarks of the stack, each a module run from the repository root.

    python -m bench.<name> --help

`bench.lib` holds what several of them share (percentiles, the results folder,
the machine's name, the spoken questions, a raw Realtime client, the local
cluster); every result is written under bench/results/.
"""
