"""The machine a benchmark runs on: its name, free ports, package versions, and
the GPU and host memory a run holds."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import socket
import subprocess
import threading
import time
from importlib import metadata
from pathlib import Path


def now() -> float:
    # CLOCK_MONOTONIC is one clock for every process of the machine: client
    # processes share schedules by it.
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


def gpu_memory_by_pid() -> dict[int, float]:
    """MiB of GPU memory each compute process holds (nvidia-smi; {} without one)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    used = {}
    for line in out.splitlines():
        with contextlib.suppress(ValueError):
            pid, mib = (x.strip() for x in line.split(","))
            used[int(pid)] = float(mib)
    return used


def device_name() -> str:
    gpus = gpu_query("name")
    if gpus:
        return f"{gpus[0]} ({len(gpus)} GPU)" if len(gpus) == 1 else f"{gpus[0]} x{len(gpus)}"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"CPU: {line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    return f"CPU: {platform.processor() or platform.machine()}"


def gpu_sharing() -> str | None:
    """How the machine's processes share its GPU: "mps" when they are CUDA MPS
    clients (bench/recipes/voice_gpu.sh --mps exports the daemon's pipe), else the
    driver's time slices; None without a GPU."""
    if not gpu_query("name"):
        return None
    return "mps" if os.environ.get("CUDA_MPS_PIPE_DIRECTORY") else "time-slicing"


def torch_device_name(device: str) -> str:
    """The card a torch device string names (`cuda`, `cuda:N`), or "cpu"."""
    if not device.startswith("cuda"):
        return "cpu"
    import torch  # the GPU benchmarks' only: the others never load it

    return str(torch.cuda.get_device_name(device))


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


def peak_rss_mib(pid: int) -> float:
    """A process's own peak resident memory (VmHWM), MiB; 0 when unreadable."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


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
