"""A `moshi` stage0 worker's fan-in: N paced sessions through K front ends (`duplex_front_ends`).

    python -m bench.duplex_fanin --front-ends 1,2 --levels 8,16,32,48,64 --window-s 8
    python -m bench.duplex_fanin --table bench/results/duplex-fanin-cpu.json

The question is the worker process's, not the model's: whether one event loop
and GIL carrying every session's gRPC messages beside the step run late before
the step does, and how many more sessions K front ends hold. So the model is
`random:tiny` on the CPU (its step a few ms), and the worker is the real one
(`python -m antiphon.stage0.main`, no Redis: each front end is dialled at its
address), capacity the largest level. Per K, per level, N sessions act as
the session service does (bench/duplex/clients.py, without a stage1): a
Stage0Service.Bind stream each, 80 ms of PCM16 every 80 ms on the wall clock
against deadlines, session i on front end i mod K; the frames are what comes
back. After --warmup-s, over --window-s: the step p50/p99 and late frames
(the stepper's or the worker's metrics), the gap between consecutive frames
at each client (p50/p99 over all sessions; 80 ms is real time), the messages
the worker handled per second (audio in + frames out), and whether the level
held: no late frame, gap p99 < 120 ms, every session streaming, no error.
"""
