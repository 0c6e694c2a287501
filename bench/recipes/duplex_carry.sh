#!/usr/bin/env bash
# What bench.duplex needs on the GPU machine (no registry there), as slices of one device
# call each: the wheels of bench/recipes/duplex-wheels.txt (moshi, gRPC, settings, and what the
# workers' entry points import) and the stand-in for PyAV that bench/recipes/gpu_carry.sh also makes.
# No vLLM and no model files: the duplex checkpoint is `random:7b` (random weights).
#
# Usage, here in the repo root:
#   bench/recipes/duplex_carry.sh [DEST [MORE_WHEELS.txt...]]
#     (DEST default .duplex-carry, ignored through .git/info/exclude; Nemotron VoiceChat's
#     run adds bench/recipes/nemotron-wheels.txt: NeMo and what it imports)
# Then (bench/recipes/GPU.md, "Duplex"): one device call per slice, and on the last
#   bash bench/recipes/gpu_install.sh /tmp/carry     (joins the slices into /tmp/site)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
dest=${1:-.duplex-carry}
shift || true
grep -qx "/$dest/" .git/info/exclude 2>/dev/null || echo "/$dest/" >> .git/info/exclude

source bench/recipes/carry_lib.sh
dl=$dest/download
stage=$dest/stage
download_wheels "$dl" bench/recipes/duplex-wheels.txt "$@"

rm -rf "$stage" && mkdir -p "$stage/wheels" "$stage/models" "$stage/site/av"
cp "$dl"/*.whl "$stage/wheels/"
cat > "$stage/site/av/__init__.py" <<'PY'
"""Stand-in for PyAV: faster_whisper.audio imports it at the top, and no duplex worker
decodes a file with it. Carried for bench.duplex only (bench/recipes/duplex_carry.sh)."""
PY

slice_payload "$dest" "$stage" 56
echo "device calls: bench/recipes/GPU.md, Duplex"
