"""MiniCPM-o 4.5's voice on a GPU: what a batch of sessions' units costs the
talker and token2wav, at the published shapes with random weights.

    python -m bench.probes.minicpmo_voice --device cuda --levels 1,16,32,64 --out $OUT/v.json

stage1's `minicpmo` backend speaks every session's unit of a second in one
batch (voice.py): the talker's codes for all of them in one forward a step
(talker.py `speak_batch`), then token2wav's flow for all of them together
and HiFT per session (token2wav.py `push_batch`). Here B sessions' turns
are spoken in lockstep, every unit of every session in one batch, which is
the worst a worker meets (sessions' units arrive spread over the second and
would make smaller batches): a turn's first unit, `--units` mid-turn units,
and a last one with `<|turn_eos|>`. Each unit carries `--text-tokens` text
ids (the thinker's text of a second of speech is some 5 to 19).

Reported per level: each batch's talker and token2wav seconds (the first
unit's apart: its flow call is the turn's first, before its caches reach
their steady length), the real-time factor of a mid-turn batch (its
seconds over the second of audio it gives each session: a unit's delay
from its text to its audio, under 1 s), the slower model's seconds (the
worker pipelines the two, so that is what it must keep under a second to
keep up), and the GPU memory the level peaked at. The models run one after
the other here, so each is timed alone. Runs on the CPU too at `random:tiny`,
which is how the tests keep it working.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.machine import torch_device_name
from bench.lib.results import write_json


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default="random:4.5")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--levels", default="1,16,32,64")
    parser.add_argument("--units", type=int, default=6, help="mid-turn units a level")
    parser.add_argument("--text-tokens", type=int, default=12)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument(
        "--talker-graphs",
        default="on",
        choices=["on", "off"],
        help="the talker's decode steps as CUDA graphs (on) or eager",
    )
    parser.add_argument(
        "--solver-steps",
        default="auto",
        choices=["auto", "direct", "static", "graphs"],
        help="token2wav's solver steps (Token2Wav's solver_steps; auto: graphs on a GPU)",
    )
    parser.add_argument(
        "--voice-cache",
        default="auto",
        choices=["auto", "float32", "float16"],
        help="token2wav's solver caches (stage1's duplex_voice_cache)",
    )
    parser.add_argument(
        "--together-s",
        type=float,
        default=0.0,
        help="then the talker and token2wav on two threads at once for this long, "
        "as the worker's pipeline runs them (each capturing its CUDA graphs)",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",")]
    result: dict[str, Any] = {
        "checkpoint": args.checkpoint,
        "device": torch_device_name(args.device),
        "units": args.units,
        "text_tokens": args.text_tokens,
        "levels": [],
    }
    voice = load(args.checkpoint, args.device, args.voice_cache, args.solver_steps)
    result["voice_cache"] = voice["token2wav"].cache_dtype
    voice["talker"].cuda_graphs = args.talker_graphs == "on"
    result["talker_graphs"] = args.talker_graphs
    result["solver_steps"] = args.solver_steps
    result["load_s"] = voice.pop("load_s")
    for sessions in levels:
        try:
            level = run_level(voice, sessions, args)
        except RuntimeError as exc:  # CUDA's out of memory is one
            result["levels"].append({"sessions": sessions, "error": str(exc)[:300]})
            print(f"{sessions} sessions: {str(exc)[:200]}", flush=True)
            break
        result["levels"].append(level)
        print(line(level), flush=True)
        write_json(args.out, result)
    if args.together_s > 0:
        result["together"] = run_together(voice, 8, args.together_s)
        print(f"together: {result['together']}", flush=True)
    write_json(args.out, result)
    shutil.rmtree(voice["folder"], ignore_errors=True)


def load(name: str, device: str, cache: str, solver_steps: str = "auto") -> dict[str, Any]:
    """The checkpoint's talker and token2wav, as stage1's voice.py loads them."""
    from transformers import AutoTokenizer

    from antiphon.common.minicpmo import checkpoint, four_five, tiny
    from antiphon.common.minicpmo import tokenizer as tok
    from antiphon.stage1.backends.minicpmo.talker import Talker
    from antiphon.stage1.backends.minicpmo.token2wav import Token2Wav, cache_dtype

    start = time.perf_counter()
    ckpt = checkpoint.resolve(name)
    if ckpt.has_weights:
        talker = Talker.load(ckpt.folder, device=device)
    else:
        talker = Talker.drawn(ckpt.folder, device=device)
        four_five.write_voice(ckpt.folder)
    token2wav = Token2Wav.load(
        ckpt.folder / tiny.TOKEN2WAV_FOLDER,
        device=device,
        cache_dtype=cache_dtype(cache, device),
        solver_steps=solver_steps,
    )
    tokenizer = AutoTokenizer.from_pretrained(str(ckpt.folder), trust_remote_code=True)
    return {
        "talker": talker,
        "token2wav": token2wav,
        "turn_eos": tokenizer.convert_tokens_to_ids(tok.TURN_EOS),
        "vocabulary": min(len(tokenizer), talker.config.num_text_tokens),
        "folder": ckpt.folder,
        "load_s": round(time.perf_counter() - start, 1),
    }


def run_level(voice: dict[str, Any], sessions: int, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from antiphon.stage1.backends.minicpmo.talker import TalkerUnit

    talker, token2wav = voice["talker"], voice["token2wav"]
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    rng = np.random.default_rng(sessions)
    turns = [talker.turn(seed=s, temperature=args.temperature) for s in range(sessions)]
    streams = [token2wav.stream() for _ in range(sessions)]
    batches: list[dict[str, Any]] = []
    for unit in range(args.units + 2):
        last = unit == args.units + 1
        texts = [
            [int(t) for t in rng.integers(0, voice["vocabulary"] - 1, args.text_tokens)]
            + ([voice["turn_eos"]] if last else [])
            for _ in range(sessions)
        ]
        sync(cuda)
        start = time.perf_counter()
        codes = talker.speak_batch(
            [TalkerUnit(turn, text, None, last) for turn, text in zip(turns, texts, strict=True)]
        )
        sync(cuda)
        spoken = time.perf_counter()
        audio = token2wav.push_batch(
            [(stream, c, last) for stream, c in zip(streams, codes, strict=True)]
        )
        sync(cuda)
        done = time.perf_counter()
        batches.append(
            {
                "talker_s": round(spoken - start, 4),
                "token2wav_s": round(done - spoken, 4),
                "codes": sum(len(c) for c in codes),
                "audio_s": round(sum(len(a) for a in audio) / token2wav.rate, 2),
            }
        )
    mid = batches[1 : args.units + 1]
    total = [b["talker_s"] + b["token2wav_s"] for b in mid]
    return {
        "sessions": sessions,
        "first_unit_s": round(batches[0]["talker_s"] + batches[0]["token2wav_s"], 4),
        "mid_turn": {
            "talker_s_p50": round(statistics.median(b["talker_s"] for b in mid), 4),
            "token2wav_s_p50": round(statistics.median(b["token2wav_s"] for b in mid), 4),
            "batch_s_p50": round(statistics.median(total), 4),
            "batch_s_max": round(max(total), 4),
            # A batch gives each session a second of audio.
            "real_time_factor": round(max(total) / 1.0, 3),
            # The worker runs the two as a pipeline (voice.py): while token2wav
            # voices one batch the talker makes the next, so it keeps up while
            # the slower of them stays under a second.
            "pipelined_s_max": round(max(max(b["talker_s"], b["token2wav_s"]) for b in mid), 4),
        },
        "last_unit_s": round(batches[-1]["talker_s"] + batches[-1]["token2wav_s"], 4),
        "gpu_peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
        "batches": batches,
    }


def run_together(voice: dict[str, Any], sessions: int, seconds: float) -> dict[str, Any]:
    """The talker speaking batches of `sessions` units while token2wav
    voices turns of as many streams (a first call, two mid-turn ones, a
    last), each on its own thread for `seconds`: the batches each made and
    the first error of each, if any."""
    import threading

    from antiphon.stage1.backends.minicpmo.talker import TalkerUnit

    talker, token2wav = voice["talker"], voice["token2wav"]
    deadline = time.perf_counter() + seconds
    done = {"talker": 0, "token2wav": 0}
    errors: dict[str, str] = {}

    def talk() -> None:
        turns = [talker.turn(seed=s) for s in range(sessions)]
        text = list(range(100, 112))
        while time.perf_counter() < deadline:
            talker.speak_batch([TalkerUnit(turn, text, None, False) for turn in turns])
            done["talker"] += 1

    def speak() -> None:
        rng = np.random.default_rng(0)
        while time.perf_counter() < deadline:
            streams = [token2wav.stream() for _ in range(sessions)]
            for call in range(4):
                codes = [[int(c) for c in rng.integers(0, 6561, 25)] for _ in streams]
                token2wav.push_batch(
                    [(s, c, call == 3) for s, c in zip(streams, codes, strict=True)]
                )
                done["token2wav"] += 1

    def guarded(name: str, run: Any) -> None:
        try:
            run()
        except Exception as exc:  # reported, not raised: the other thread's count still tells
            errors[name] = repr(exc)[:300]

    threads = [
        threading.Thread(target=guarded, args=("talker", talk)),
        threading.Thread(target=guarded, args=("token2wav", speak)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"sessions": sessions, "seconds": seconds, "batches": done, "errors": errors}


def sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


def line(level: dict[str, Any]) -> str:
    mid = level["mid_turn"]
    return (
        f"{level['sessions']:>3} sessions: first unit {level['first_unit_s'] * 1000:.0f} ms, "
        f"mid-turn talker {mid['talker_s_p50'] * 1000:.0f} + token2wav "
        f"{mid['token2wav_s_p50'] * 1000:.0f} ms (max batch {mid['batch_s_max'] * 1000:.0f} ms, "
        f"RTF {mid['real_time_factor']}, pipelined {mid['pipelined_s_max'] * 1000:.0f} ms), "
        f"peak {level['gpu_peak_gib']} GiB"
    )


if __name__ == "__main__":
    main()
