"""Stage0 capacity on one GPU (or this CPU): N sessions through the worker's own Bind stream.

    python -m bench.gpu --model qwen2.5-coder-0.5b --levels 1,2 --out /tmp/gpu.json
    python -m bench.gpu --model /tmp/models/qwen2.5-coder-1.5b-instruct --dummy qwen2.5-7b \\
        --levels 1,16,64,128,256,512 --with-raw --out $OUT/gpu-h200.json
    python -m bench.gpu --table bench/results/gpu-h200.json

Starts stage0 as a real gRPC worker (`python -m antiphon.stage0.main`, no
Redis: the worker registers nowhere and is dialled at its address, as the
session service's static list does) and, per level, opens N sessions on its
`Bind` stream the way the session service does (stage_links.py): `open` in the
manual lane with the VAD running, then per turn the spoken question as PCM16
16 kHz in 200 ms chunks paced in real time, `commit`, the `transcript`, and a
`generate` whose messages are the instructions and every earlier turn (what
Whisper heard, what the model said), so turn N's prompt extends turn N-1's
and the prefix cache counts. Every session of a level asks at the same
instant (a barrier across the client processes once all transcripts are in),
as the raw-vLLM figures in ../shared/gpu/README.md were taken.

Per level: TTFT p50/p95 as the session sees it (`generate` sent -> first text
delta received; `stage_ttft_ms` is the engine's own, from the `done` metrics),
TPOT p50 (engine clocks), ASR per utterance (`commit` sent -> `transcript`
received, queueing included), the VAD's batch sizes (the worker's Prometheus
histogram), GPU memory (nvidia-smi), completed and expected turns; and
`capacity_at_slo`, the largest N whose TTFT p95 is within 150 ms with every
turn completed. `--raw-vllm` runs the same prompts (same engine arguments,
through antiphon.stage0.backends.cascade.llm.llm's builder) on vLLM's AsyncLLM in this process, no
worker and no gRPC, each turn timed from its burst's start (every prompt's ids
ready) to its first text, as the worker's clients time theirs; `--with-raw`
does that after the worker run and adds the ratio. `--profile-at N` samples the
worker with py-spy through level N; `--services DIR` runs the worker from
another checkout's services/ (an A/B in one device session). `--dummy SHAPE`
serves random weights (`llm_load_format: dummy`) from a config.json written
beside `--model`'s tokenizer: compute cost is the real one.

The speech is `bench/fixtures/gpu_speech.npz` (made here once by `--make-speech`, with
Piper): the GPU machine has no voice to make it with.
"""
