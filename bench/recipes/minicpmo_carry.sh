#!/usr/bin/env bash
# What `python -m bench.duplex --model minicpmo` (the thinker and its voice) needs on the
# GPU machine (no registry there), as slices of one device call each: vLLM 0.26.0 and the
# packages its image lacks (../shared/gpu/vllm-gpu-wheels.txt) and the workers' own
# (bench/recipes/minicpmo-wheels.txt: gRPC and settings, and for the voice
# stepaudio2-minicpmo's token2wav modules and scipy). No model files: `random:4.5` is
# written by the workers (config, tokenizer, processors; the voice's talker and token2wav
# weights drawn where they load) and the thinker's weights are vLLM's dummy ones.
#
# Usage, here in the repo root:
#   bench/recipes/minicpmo_carry.sh [DEST]    (default .minicpmo-carry, ignored through .git/info/exclude)
# Then (bench/recipes/GPU.md, "MiniCPM-o 4.5"): one device call per slice, and on the last
#   bash bench/recipes/gpu_install.sh /tmp/carry     (joins the slices into /tmp/site)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
dest=${1:-.minicpmo-carry}
shared=${SHARED_GPU:-$repo/../shared/gpu}
grep -qx "/$dest/" .git/info/exclude 2>/dev/null || echo "/$dest/" >> .git/info/exclude

source bench/recipes/carry_lib.sh
dl=$dest/download
stage=$dest/stage
download_wheels "$dl" "$shared/vllm-gpu-wheels.txt" bench/recipes/minicpmo-wheels.txt

rm -rf "$stage" && mkdir -p "$stage/wheels" "$stage/models" "$stage/site"
cp "$dl"/*.whl "$stage/wheels/"
# A slice and the tracked tree (about 5 MiB) travel together, 64 MiB at most.
slice_payload "$dest" "$stage" 56
echo "device calls: bench/recipes/GPU.md, MiniCPM-o 4.5"
