#!/usr/bin/env bash
# On the GPU machine, in the repo root: the whole stack's bench in the GPU
# profile (bench/recipes/GPU.md, "The whole stack"), with a random-weights LLM held to
# common words (bench/gpu/speakable.py). Its sessions are WebSockets: the
# gateway runs without its WebRTC edge (aiortc is not in the voice carry).
#
# Usage: bash bench/recipes/voice_gpu.sh [--install] [--mps] SHAPE NAME LIMIT_S [bench.load args ...]
#   --install  join and install the slices first (.voice-carry/p10 carried, p0..p9 in /tmp/carry)
#   --mps      the stack's processes share the card through a CUDA MPS daemon started here
#              (and stopped at the end), not the driver's time slices between processes
#   SHAPE      a bench/gpu/models.py shape ("qwen2.5-7b"), or "same": the embedded 1.5B's own
#   NAME       $OUT/NAME.json and $OUT/NAME.log; the services' logs beside them
#   LIMIT_S    bench.load gets SIGINT then, and writes the levels it finished
set -uo pipefail
if [ "${1:-}" = --install ]; then
  shift
  mkdir -p /tmp/carry && cp -r .voice-carry/p10 /tmp/carry/ \
    && bash bench/recipes/gpu_install.sh /tmp/carry > "$OUT/install.log" 2>&1 \
    || { tail -20 "$OUT/install.log"; exit 1; }
fi
if [ "${1:-}" = --mps ]; then
  shift
  # Every process of the stack inherits the pipe and becomes the daemon's client
  # (bench.load records gpu_sharing from it). A client that cannot start means
  # no run: a stack that quietly fell back would measure the wrong thing.
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "no MPS daemon"; exit 1; }
  trap 'echo quit | nvidia-cuda-mps-control' EXIT
  python3 -c "import torch; torch.ones(1, device='cuda').sum().item()" \
    || { tail -5 "$CUDA_MPS_LOG_DIRECTORY/control.log"; exit 1; }
fi
shape=$1 name=$2 limit=$3
shift 3
repo=$PWD
export PYTHONPATH=/tmp/site:$repo/services/common:$repo/services/gateway:$repo/services/session:$repo/services/stage0:$repo/services/stage1:$repo/client:$repo
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_ATTENTION_BACKEND=FLASH_ATTN
export ANTIPHON_MODEL_CACHE=/tmp/models PATH=/tmp/models/redis/usr/bin:$PATH
export LD_LIBRARY_PATH=/tmp/models/redis/usr/lib/x86_64-linux-gnu
model=/tmp/dummy/$shape
# gpu.yaml gives vLLM 0.5 of an H200's 141 GB; on an 80 GB card that share
# leaves too little for the other eight processes (a later --env overrides).
card=()
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
[ "${mem:-0}" -lt 100000 ] && card=(--env ANTIPHON_LLM_GPU_MEMORY_UTILIZATION=0.3)
python3 -c "from pathlib import Path; from bench.gpu.models import make_dummy; make_dummy(Path('/tmp/models/qwen2.5-coder-1.5b-instruct'), '$shape', Path('$model'))" || exit 1
timeout -s INT "$limit" python3 -m bench.load --backend cascade --lane server_vad --voice piper \
  --turns 2 --slo-ms 1000 --timeout 30 --no-response-s 20 \
  --profile deploy/profiles/gpu.yaml --front-ends 4 --stage1-workers 4 \
  --env ANTIPHON_LLM_MODEL="$model" --env ANTIPHON_LLM_LOAD_FORMAT=dummy \
  --env ANTIPHON_LLM_ALLOWED_TOKENS_FILE="$model/speakable_tokens.json" \
  --env ANTIPHON_LLM_LOOP_NGRAM=0 --env ANTIPHON_MAX_OUTPUT_TOKENS=32 \
  --env ANTIPHON_WEBRTC_CALLS=false \
  --out "$OUT/$name.json" "${card[@]}" "$@" > "$OUT/$name.log" 2>&1
grep -v "turn/s" "$OUT/$name.log" | tail -30
rm -f "$OUT"/*.png
logs=$(ls -td /tmp/antiphon-*/ 2>/dev/null | head -1)
# The stages' logs only: a call returns about eight files, and two stacks in
# one call would otherwise lose their results.
for service in stage0 stage1; do
  [ -f "$logs$service.log" ] && tail -c 2000000 "$logs$service.log" > "$OUT/$name-$service.log"
done
exit 0
