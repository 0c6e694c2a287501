"""An onnxruntime session of an int8 (QDQ) graph that sums its products exactly
on every x86 CPU, so that a quantized model answers alike wherever it runs.

Smart Turn v3.2 multiplies uint8 activations by int8 weights. onnxruntime's
kernels for that (MLAS, "u8s8") sum four products at a time into 32 bits
where the CPU has an int8 dot product (AVX-512 VNNI, AVX-VNNI, AMX). Without
one (AVX2 alone, e.g. AMD Zen 2 and 3; AVX-512 before Cascade Lake) they use
VPMADDUBSW, which adds each pair of neighbouring products in saturating
16-bit arithmetic: 255 x 127 x 2 = 64770 is clipped to 32767. Smart Turn's
weights span the whole int8 range and its sums saturate. On an EPYC Zen 2
the recorded questions of bench/probes/turn_gpu.py scored up to 2.5 in the logit
off what the hosts of bench/results/turn-*.json gave (0.704 for one they
scored 0.967); espeak's "What I really want is", broken off, scored 0.099
where exact sums give 0.017, and a 700 ms pause there ended the turn.

`session.x64quantprecision` (onnxruntime's `kOrtSessionOptionsAvx2PrecisionMode`)
has the session rewrite each int8 weight as uint8, its zero point shifted
with it: the same products, summed by the uint8-by-uint8 kernels, which
widen to 16 bits before they add and never saturate. With it the Zen 2 gives
those hosts' answers to four digits, at no measured cost (one thread: 109 ms
a window against 110). It is set only where the CPU has no int8 dot product:
with one, the u8s8 kernels are exact already and faster than the u8u8 ones
the entry would put in their place.
"""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort

from antiphon.stage0.backends.cascade.listening.vad import cpu_session
from antiphon.stage0.backends.cascade.llm.cpu_choice import CpuFeatures

PRECISION_ENTRY = "session.x64quantprecision"
# /proc/cpuinfo's names of the instructions onnxruntime's u8s8 kernels sum
# 32-bit with (platform.cpp picks its VNNI and AMX kernels by them).
_INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


def sums_exactly(cpu: CpuFeatures) -> bool:
    """Whether onnxruntime's uint8-by-int8 kernels are exact on `cpu` as they come."""
    return bool(cpu.flags & _INT8_DOT_FLAGS)


def exact_int8_session(
    model: Path | bytes, threads: int, cpu: CpuFeatures | None = None
) -> ort.InferenceSession:
    """vad.py's `cpu_session` (the threads it is given, one at a time) for an
    int8 graph, its products summed exactly on `cpu` (this machine's by default)."""
    # Where the u8s8 kernels cannot saturate (off x86, no AVX2) the entry changes nothing.
    exact = sums_exactly(cpu or CpuFeatures.read())
    return cpu_session(model, threads, None if exact else {PRECISION_ENTRY: "1"})
