#!/usr/bin/env bash
# Everything the whole stack needs on the GPU machine (no registry there), for
# bench/recipes/voice_gpu.sh: bench/recipes/gpu_carry.sh's payload (vLLM 0.26.0, stage0's wheels,
# Whisper base, Silero, Smart Turn, the Qwen2.5-Coder-1.5B config and tokenizer)
# plus the gateway's, session's and stage1's wheels (bench/recipes/voice-wheels.txt,
# Piper and the shipped voice among them) and Redis from Debian's packages.
#
# Usage, here in the repo root, once `make models` has prepared ~/.cache/antiphon/models:
#   bench/recipes/voice_carry.sh [DEST]      (default .voice-carry, ignored through .git/info/exclude)
# Then one device call per slice, back to back (bench/recipes/GPU.md, "The whole stack").
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.voice-carry/' .git/info/exclude 2>/dev/null || echo '/.voice-carry/' >> .git/info/exclude
EXTRA_WHEELS=bench/recipes/voice-wheels.txt WITH_REDIS=1 exec bench/recipes/gpu_carry.sh "${1:-.voice-carry}"
