#!/usr/bin/env bash
# What bench/duplex.py needs on the GPU machine (no registry there), as slices of one device
# call each: the wheels of bench/duplex-wheels.txt (moshi, gRPC, settings, and what the
# workers' entry points import) and the stand-in for PyAV that bench/gpu_carry.sh also makes.
# No vLLM and no model files: the duplex checkpoint is `random:7b` (random weights).
#
# Usage, here in the repo root:
#   bench/duplex_carry.sh [DEST]     (default .duplex-carry, ignored through .git/info/exclude)
# Then (bench/GPU.md, "Duplex"): one device call per slice, and on the last
#   bash bench/gpu_install.sh /tmp/carry     (joins the slices into /tmp/site)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
dest=${1:-.duplex-carry}
grep -qx "/$dest/" .git/info/exclude 2>/dev/null || echo "/$dest/" >> .git/info/exclude

dl=$dest/download
stage=$dest/stage
mkdir -p "$dl"
sed 's/#.*//' bench/duplex-wheels.txt | grep . | while read -r spec; do
  name=$(echo "${spec%%==*}" | tr 'A-Z-' 'a-z_')
  ver=${spec##*==}
  ls "$dl" | tr 'A-Z-' 'a-z_' | grep -q "^${name}-${ver}-\|^${name}_${ver}_\|^${name}-${ver}\.\|^${name}_${ver}-" && continue
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 \
    -q -d "$dl" "$spec" 2>&1 | grep -v WARNING || true
done
want=$(sed 's/#.*//' bench/duplex-wheels.txt | grep -c .)
have=$(ls "$dl"/*.whl | wc -l)
[ "$have" -ge "$want" ] || { echo "only $have of $want wheels downloaded" >&2; exit 1; }

rm -rf "$stage" && mkdir -p "$stage/wheels" "$stage/models" "$stage/site/av"
cp "$dl"/*.whl "$stage/wheels/"
cat > "$stage/site/av/__init__.py" <<'PY'
"""Stand-in for PyAV: faster_whisper.audio imports it at the top, and no duplex worker
decodes a file with it. Carried for bench/duplex.py only (bench/duplex_carry.sh)."""
PY

# One compressed stream cut into slices: each slice plus the working tree stays under 64 MiB.
rm -rf "$dest"/p[0-9]*
tar -C "$stage" -czf - wheels models site | split -b 56m -d -a 2 - "$dest/payload.part"
(cd "$dest" && cat payload.part* | sha256sum | cut -d' ' -f1) > "$dest/payload.sha256"
n=0
for part in "$dest"/payload.part*; do mkdir -p "$dest/p$n"; mv "$part" "$dest/p$n/"; n=$((n+1)); done
cp "$dest/payload.sha256" "$dest/p0/"
echo "$n" > "$dest/p0/slices"
rm -rf "$stage"
du -sh "$dest"/p*
echo "$n slices; device calls: bench/GPU.md, Duplex"
