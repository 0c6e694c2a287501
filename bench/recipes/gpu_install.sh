#!/usr/bin/env bash
# On the GPU machine: join the slices that bench/recipes/gpu_carry.sh made (copied to /tmp/carry
# by one device call each) and install them: wheels into /tmp/site, model files into
# /tmp/models. Then: export PYTHONPATH=/tmp/site:services/common:services/stage0 (bench/recipes/GPU.md).
set -euo pipefail
carry=${1:-/tmp/carry}
cd "$carry"
want=$(cat p0/slices)
parts=$(ls -1 p*/payload.part* | sort -t/ -k2)
have=$(echo "$parts" | wc -l)
if [ "$have" != "$want" ]; then
  echo "have $have of $want slices: $(echo $parts)" >&2
  exit 1
fi
# shellcheck disable=SC2086
sum=$(cat $parts | sha256sum | cut -d' ' -f1)
if [ "$sum" != "$(cat p0/payload.sha256)" ]; then
  echo "the joined slices' sha256 is $sum, not $(cat p0/payload.sha256)" >&2
  exit 1
fi
rm -rf /tmp/gpu-payload && mkdir -p /tmp/gpu-payload
# shellcheck disable=SC2086
cat $parts | tar -xz -C /tmp/gpu-payload
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site /tmp/gpu-payload/wheels/*.whl
cp -r /tmp/gpu-payload/site/. /tmp/site/
mkdir -p /tmp/models && cp -r /tmp/gpu-payload/models/. /tmp/models/
rm -rf /tmp/gpu-payload
echo "installed into /tmp/site and /tmp/models"
