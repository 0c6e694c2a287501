"""A results file as the markdown table of docs/performance.md (`--table`), and two
runs' files as one (`--merge`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.gpu.levels import SLO_MS
from bench.lib.results import write_json


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


def merge(main: Path, default: Path, out: Path) -> None:
    """`main` with `default` as its embedded_default, written to `out`."""
    data = json.loads(main.read_text())
    data["embedded_default"] = json.loads(default.read_text())
    write_json(out, data)
    print(f"wrote {out}")
