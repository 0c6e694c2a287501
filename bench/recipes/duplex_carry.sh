#!/usr/bin/env bash
# What bench.duplex needs on the GPU machine (no registry there), as slices of one device
# call each: the wheels of bench/recipes/serving-wheels.txt (gRPC, settings) and of the model's
# own list, and the stand-in for PyAV that bench/recipes/gpu_carry.sh also makes.
# No vLLM and no model files: the duplex checkpoint is `random:7b` (random weights).
#
# Usage, here in the repo root:
#   bench/recipes/duplex_carry.sh [DEST [MODEL_WHEELS.txt...]]
#     (DEST default .duplex-carry, ignored through .git/info/exclude; the lists default to
#     bench/recipes/duplex-wheels.txt, the Moshi architecture's; Nemotron VoiceChat's run
#     names bench/recipes/nemotron-wheels.txt instead: NeMo and what it imports)
# Then (bench/recipes/GPU.md, "Duplex"): one device call per slice, and on the last
#   bash bench/recipes/gpu_install.sh /tmp/carry     (joins the slices into /tmp/site)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
dest=${1:-.duplex-carry}
shift || true
lists=("$@")
[ ${#lists[@]} -gt 0 ] || lists=(bench/recipes/duplex-wheels.txt)
grep -qx "/$dest/" .git/info/exclude 2>/dev/null || echo "/$dest/" >> .git/info/exclude

source bench/recipes/carry_lib.sh
dl=$dest/download
stage=$dest/stage
download_wheels "$dl" bench/recipes/serving-wheels.txt "${lists[@]}"

rm -rf "$stage" && mkdir -p "$stage/wheels" "$stage/models" "$stage/site/av"
cp "$dl"/*.whl "$stage/wheels/"
cat > "$stage/site/av/__init__.py" <<'PY'
"""Stand-in for PyAV: faster_whisper.audio imports it at the top, and no duplex worker
decodes a file with it. Carried for bench.duplex only (bench/recipes/duplex_carry.sh)."""
PY

slice_payload "$dest" "$stage" 56
echo "device calls: bench/recipes/GPU.md, Duplex"
