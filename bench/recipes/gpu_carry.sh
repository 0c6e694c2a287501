#!/usr/bin/env bash
# Everything bench.gpu needs on the GPU machine (no registry there), as slices of one
# device call each: vLLM 0.26.0 and its missing dependencies (../shared/gpu/vllm-gpu-wheels.txt),
# stage0's own (bench/recipes/gpu-wheels.txt), and the model files: Whisper base (CTranslate2),
# Silero VAD, Smart Turn and its features module, and the Qwen2.5-Coder-1.5B config and
# tokenizer that the dummy models are made from (no weights: they are random there).
#
# Usage, here in the repo root, once `make models` has prepared ~/.cache/antiphon/models:
#   bench/recipes/gpu_carry.sh [DEST]        (default .gpu-carry, ignored through .git/info/exclude)
# Then one device call per slice, back to back (bench/recipes/GPU.md has the sequence), and
#   bash bench/recipes/gpu_install.sh        (joins the slices from /tmp/carry into /tmp/site, /tmp/models)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
dest=${1:-.gpu-carry}
shared=${SHARED_GPU:-$repo/../shared/gpu}
cache=${ANTIPHON_MODEL_CACHE:-$HOME/.cache/antiphon/models}
py=${PYTHON:-.venv/bin/python}
grep -qx '/.gpu-carry/' .git/info/exclude 2>/dev/null || echo '/.gpu-carry/' >> .git/info/exclude

source bench/recipes/carry_lib.sh
dl=$dest/download
stage=$dest/stage
# EXTRA_WHEELS: more spec files (bench/recipes/voice_carry.sh: the rest of the stack's).
# shellcheck disable=SC2086
download_wheels "$dl" "$shared/vllm-gpu-wheels.txt" bench/recipes/gpu-wheels.txt ${EXTRA_WHEELS:-}

rm -rf "$stage" && mkdir -p "$stage/wheels" "$stage/models" "$stage/site"
cp "$dl"/*.whl "$stage/wheels/"
# Whisper base, as stage0's assets.prepare joined it.
cp -r "$cache/whisper-base-ct2" "$stage/models/"
# The 1.5B's config and tokenizer: the embedded default as a dummy, and the 8B dummy's tokenizer.
q=$stage/models/qwen2.5-coder-1.5b-instruct
mkdir -p "$q"
for f in config.json tokenizer.json tokenizer_config.json chat_template.jinja generation_config.json; do
  cp "$cache/qwen2.5-coder-1.5b-instruct/$f" "$q/"
done
# Silero VAD and Smart Turn where assets.locate finds them: inside packages of those names.
"$py" - "$stage/site" <<'PY'
import importlib.util, shutil, sys
from pathlib import Path
site = Path(sys.argv[1])
def pkg(name):
    return Path(importlib.util.find_spec(name).submodule_search_locations[0])
vad = site / "silero_vad" / "data"
vad.mkdir(parents=True)
(site / "silero_vad" / "__init__.py").write_text("")
shutil.copyfile(pkg("silero_vad") / "data" / "silero_vad.onnx", vad / "silero_vad.onnx")
turn = site / "pipecat" / "audio" / "turn" / "smart_turn"
(turn / "data").mkdir(parents=True)
(site / "pipecat" / "__init__.py").write_text("")
src = pkg("pipecat") / "audio" / "turn" / "smart_turn"
shutil.copyfile(src / "_whisper_features.py", turn / "_whisper_features.py")
shutil.copyfile(src / "data" / "smart-turn-v3.2-cpu.onnx", turn / "data" / "smart-turn-v3.2-cpu.onnx")
av = site / "av"
av.mkdir()
(av / "__init__.py").write_text(
    '"""Stand-in for PyAV: faster_whisper.audio imports it at the top, and stage0 never\n'
    'decodes a file with it (its audio arrives as PCM). Carried for bench.gpu only."""\n'
)
PY

# WITH_REDIS=1: Redis from Debian's packages, unpacked (dpkg -x) under models/redis,
# with the libraries it links that the GPU machine's image lacks (jemalloc, lzf).
if [ -n "${WITH_REDIS:-}" ]; then
  debs=$dest/debs
  rm -rf "$debs" && mkdir -p "$debs"
  (cd "$debs" && apt-get download redis-server redis-tools libjemalloc2 liblzf1 >/dev/null)
  for deb in "$debs"/*.deb; do dpkg -x "$deb" "$stage/models/redis"; done
  rm -rf "$debs"
fi

slice_payload "$dest" "$stage" 58
echo "device calls: see bench/recipes/GPU.md"
