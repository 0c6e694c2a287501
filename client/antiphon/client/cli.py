"""`antiphon`: talk to a Realtime server from a terminal.

    antiphon ask "What is the capital of France?" --out answer.wav
    antiphon talk --in question.wav --out reply.wav
    antiphon talk                      # microphone and speaker (antiphon-client[audio])
    antiphon events --text "Hello"     # the wire log of one turn, both ways
    antiphon bench --in q.wav --sessions 1,4   # the load generator

Every command takes `--url` (default `$ANTIPHON_URL`, else the local stack's
duplex endpoint) and `--api-key` (default `$ANTIPHON_API_KEY`). Exit codes:
0 done, 1 the answer did not complete, 2 the server is unreachable,
3 refused (key, capacity), 4 a protocol error.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from antiphon.client import audio
from antiphon.client.connect import DEFAULT_URL
from antiphon.client.duplex import DuplexClient
from antiphon.client.errors import (
    ClientError,
    ProtocolError,
    Refused,
    ServerUnreachable,
    SessionClosed,
)
from antiphon.client.events import InputTranscript, pretty
from antiphon.client.microphone import Microphone
from antiphon.client.responses import ResponseHandle

MANUAL_TURNS = {"turn_detection": None}
SERVER_VAD = {"turn_detection": {"type": "server_vad"}}
# After the user's last word, the microphone keeps sending silence this long
# at most for the server to end the turn and answer.
ANSWER_TIMEOUT_S = 120.0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        # The load generator parses its own arguments (`antiphon bench -h`).
        from antiphon.client.load import bench_main  # matplotlib and tqdm only here

        return bench_main(argv[1:])
    args = _parser().parse_args(argv)
    command: Callable[[argparse.Namespace], Any] = args.run
    try:
        result = command(args)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
        return int(result or 0)
    except ServerUnreachable as exc:
        return _fail(2, f"{exc}\n  Is the server running? `make run` starts one on this machine.")
    except Refused as exc:
        hint = "  Check --api-key / $ANTIPHON_API_KEY." if exc.status in (401, 403) else ""
        return _fail(3, f"refused: {exc}\n{hint}".rstrip())
    except ProtocolError as exc:
        return _fail(4, f"the server refused a request: {exc}")
    except SessionClosed as exc:
        return _fail(1, f"the session ended: {exc}")
    except ClientError as exc:
        return _fail(1, str(exc))
    except KeyboardInterrupt:
        return 130


def _fail(code: int, message: str) -> int:
    print(f"antiphon: {message}", file=sys.stderr)
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="antiphon", description=__doc__.split("\n")[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=os.environ.get("ANTIPHON_URL", DEFAULT_URL))
    common.add_argument("--api-key", default=os.environ.get("ANTIPHON_API_KEY"))
    common.add_argument("--instructions", help="the session's instructions")
    common.add_argument("--voice", help="the assistant's voice")
    commands = parser.add_subparsers(required=True, metavar="command")

    ask = commands.add_parser("ask", parents=[common], help="ask a question in text, hear it")
    ask.add_argument("text")
    ask.add_argument("--out", help="write the spoken answer to this WAV file")
    ask.set_defaults(run=ask_command)

    talk = commands.add_parser("talk", parents=[common], help="a spoken conversation")
    talk.add_argument("--in", dest="input", help="a WAV file to say (no microphone needed)")
    talk.add_argument("--out", help="write the spoken answer to this WAV file")
    talk.set_defaults(run=talk_command)

    events = commands.add_parser("events", parents=[common], help="the wire log of one turn")
    source = events.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="a text turn")
    source.add_argument("--in", dest="input", help="a WAV file, said as a live microphone")
    events.set_defaults(run=events_command)

    commands.add_parser("bench", help="N concurrent sessions against a server (bench -h)")
    return parser


def _session(args: argparse.Namespace, turns: dict[str, Any]) -> dict[str, Any]:
    session: dict[str, Any] = {"type": "realtime", "audio": {"input": dict(turns)}}
    if args.instructions:
        session["instructions"] = args.instructions
    if args.voice:
        session["audio"]["output"] = {"voice": args.voice}
    return session


def _client(args: argparse.Namespace, turns: dict[str, Any], **kw: Any) -> DuplexClient:
    return DuplexClient(args.url, api_key=args.api_key, session=_session(args, turns), **kw)


# ------------------------------------------------------------------ ask
async def ask_command(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    async with _client(args, MANUAL_TURNS) as client:
        responses = client.responses()
        await client.say(args.text)
        await client.create_response()
        answer = await _speak_out(await anext(responses), out)
        await responses.aclose()
        return _finish(answer, args.out, client.output_rate)


async def _speak_out(answer: ResponseHandle, out: TextIO) -> ResponseHandle:
    """Print the answer's words as they arrive; return it once done."""
    printed = 0
    async for _ in answer.chunks():
        out.write(answer.transcript[printed:])
        out.flush()
        printed = len(answer.transcript)
    await answer.wait(ANSWER_TIMEOUT_S)
    out.write(answer.transcript[printed:] + answer.text + "\n")
    return answer


def _finish(answer: ResponseHandle, path: str | None, rate: int) -> int:
    if path:
        audio.write_wav(path, answer.audio, rate)
    if answer.status != "completed":
        reason = answer.done_event.reason if answer.done_event else "no response.done"
        return _fail(1, f"the answer ended {answer.status or 'early'}: {reason}")
    return 0


# ------------------------------------------------------------------ talk
def _spoken_turns(path: str) -> dict[str, Any]:
    """Server VAD, and the file's own rate when the server takes it as it is:
    converting speech costs the recogniser words."""
    rate = audio.wav_rate(path)
    if rate not in audio.INPUT_RATES:
        return SERVER_VAD
    return SERVER_VAD | {"format": {"type": "audio/pcm", "rate": rate}}


async def talk_command(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    if args.input is None:
        from antiphon.client.devices import converse  # a sound library only here

        return await converse(_client(args, SERVER_VAD), out)
    async with _client(args, _spoken_turns(args.input)) as client:
        question = audio.read_wav(args.input, client.input_rate)
        responses = client.responses()
        async with Microphone(client) as mic:
            heard = asyncio.ensure_future(client.wait_for(InputTranscript.types[0], timeout=120))
            await mic.say(question)
            answer = await asyncio.wait_for(anext(responses), ANSWER_TIMEOUT_S)
            transcript = await heard
            assert isinstance(transcript, InputTranscript)
            out.write(f"you: {transcript.transcript}\nassistant: ")
            await _speak_out(answer, out)
        await responses.aclose()
        return _finish(answer, args.out, client.output_rate)


# ------------------------------------------------------------------ events
async def events_command(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    def log(direction: str, raw: dict[str, Any]) -> None:
        out.write(f"{direction} {pretty(raw, width=100)}\n")

    turns = _spoken_turns(args.input) if args.input else MANUAL_TURNS
    async with _client(args, turns, on_frame=log) as client:
        responses = client.responses()
        if args.input:
            async with Microphone(client) as mic:
                await mic.say(audio.read_wav(args.input, client.input_rate))
                answer = await asyncio.wait_for(anext(responses), ANSWER_TIMEOUT_S)
                await answer.wait(ANSWER_TIMEOUT_S)
        else:
            await client.say(args.text)
            await client.create_response()
            answer = await anext(responses)
            await answer.wait(ANSWER_TIMEOUT_S)
        await responses.aclose()
        return 0 if answer.status == "completed" else 1


if __name__ == "__main__":
    raise SystemExit(main())
