#!/usr/bin/env bash
# On the GPU machine, in the repo root: the whole stack's bench in the GPU
# profile (bench/GPU.md, "The whole stack"), with a random-weights LLM held to
# common words (bench/gpu/speakable.py). Its sessions are WebSockets: the
# gateway runs without its WebRTC edge (aiortc is not in the voice carry).
#
# Usage: bash bench/voice_gpu.sh [--install] SHAPE NAME LIMIT_S [bench.load args ...]
#   --install  join and install the slices first (.voice-carry/p10 carried, p0..p9 in /tmp/carry)
#   SHAPE      a bench/gpu/models.py shape ("qwen2.5-7b"), or "same": the embedded 1.5B's own
#   NAME       $OUT/NAME.json and $OUT/NAME.log; the services' logs beside them
#   LIMIT_S    bench.load gets SIGINT then, and writes the levels it finished
set -uo pipefail
if [ "${1:-}" = --install ]; then
  shift
  mkdir -p /tmp/carry && cp -r .voice-carry/p10 /tmp/carry/ \
    && bash bench/gpu_install.sh /tmp/carry > "$OUT/install.log" 2>&1 \
    || { tail -20 "$OUT/install.log"; exit 1; }
fi
shape=$1 name=$2 limit=$3
shift 3
repo=$PWD
export PYTHONPATH=/tmp/site:$repo/services/common:$repo/services/gateway:$repo/services/session:$repo/services/stage0:$repo/services/stage1:$repo/client:$repo
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_ATTENTION_BACKEND=FLASH_ATTN
export ANTIPHON_MODEL_CACHE=/tmp/models PATH=/tmp/models/redis/usr/bin:$PATH
export LD_LIBRARY_PATH=/tmp/models/redis/usr/lib/x86_64-linux-gnu
model=/tmp/dummy/$shape
python3 -c "from pathlib import Path; from bench.gpu.models import make_dummy; make_dummy(Path('/tmp/models/qwen2.5-coder-1.5b-instruct'), '$shape', Path('$model'))" || exit 1
timeout -s INT "$limit" python3 -m bench.load --backend cascade --lane server_vad --voice piper \
  --turns 2 --slo-ms 1000 --timeout 30 --no-response-s 20 \
  --profile deploy/profiles/gpu.yaml --front-ends 4 --stage1-workers 4 \
  --env ANTIPHON_LLM_MODEL="$model" --env ANTIPHON_LLM_LOAD_FORMAT=dummy \
  --env ANTIPHON_LLM_ALLOWED_TOKENS_FILE="$model/speakable_tokens.json" \
  --env ANTIPHON_LLM_LOOP_NGRAM=0 --env ANTIPHON_MAX_OUTPUT_TOKENS=32 \
  --env ANTIPHON_WEBRTC_CALLS=false \
  --out "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
grep -v "turn/s" "$OUT/$name.log" | tail -30
rm -f "$OUT"/*.png
logs=$(ls -td /tmp/antiphon-*/ 2>/dev/null | head -1)
# The stages' logs only: a call returns about eight files, and two stacks in
# one call would otherwise lose their results.
for service in stage0 stage1; do
  [ -f "$logs$service.log" ] && tail -c 2000000 "$logs$service.log" > "$OUT/$name-$service.log"
done
exit 0
