"""Model-native duplex capacity: N sessions through a stage0 `moshi` and a stage1 `mimi` worker
(`--model nemotron`: both `nemotron`, Nemotron VoiceChat through NeMo's code; `--model
minicpmo`: both `minicpmo`, MiniCPM-o 4.5's thinker deciding once a second and its voice
speaking each spoken second, measured per unit by units.py, unit_voice.py and
unit_levels.py; `--no-voice` runs the thinker alone).

    python -m bench.duplex --checkpoint random:7b --device cuda --context 1500 \\
        --levels 1,16,32,64,96,128 --window-s 10 --budget-s 450 --out $OUT/duplex-h200.json
    python -m bench.duplex --checkpoint random:tiny --device cpu --levels 1,2 --window-s 3
    python -m bench.duplex --model nemotron --checkpoint random:tiny --device cpu --levels 2
    python -m bench.duplex --model minicpmo --checkpoint random:4.5 --device cuda \\
        --prime-sessions 32 --levels 16,32 --frames-at 16 --window-s 20
    python -m bench.duplex --table bench/results/duplex-h200.json

First the reference loop alone (bench/duplex/moshi_loop.py: moshi's own Mimi
encode + LMGen.step + Mimi decode of B rows in lockstep, same shape, context
and dtype; nemotron_loop.py: NeMo's own streaming inference of B rows), then
both workers as real gRPC processes (`python -m
antiphon.stage0.main` / `antiphon.stage1.main`, configured by a profile file
written beside --out, no Redis: each is dialled at its address), capacity
the largest level. Per level, N sessions act as the session service does:
a Stage0Service.Bind stream (Stage0Open in the native lane, then 80 ms of
PCM16 at the worker's input rate every 80 ms on the wall clock, paced
against deadlines, from bench/fixtures/gpu_speech.npz resampled) and a
Stage1Service.Bind stream (Stage1Open at 24 kHz) to which every ModelFrame
received is forwarded as a DecodeFrame of one response, so every frame
comes back as audio. The sessions run in client processes of their own.

After --warmup-s, over --window-s: the worker's frame step p50/p99 (its
histogram's delta over the window, interpolated within buckets), late and
silence frames and dropped input (its counters), stage1's decode step, the
gap between consecutive audio chunks each session received (p50/p99 over all
sessions; 80 ms is real time), GPU memory (nvidia-smi) and CPU of the
workers; `real_time`: worker p99 < 80 ms, no late frame, gap p99 < 120 ms,
every session streaming. Levels run in increasing order and the JSON is
written after each, so a run stopped at its limit keeps what it measured.
"""
