"""What one session's client received, checked for loss, repeats and stuck responses."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# Attachment-scoped events carry a cursor, not a journal position.
UNJOURNALED = frozenset({"session.resumed", "session.replaced", "session.resync_required"})


@dataclass
class Ledger:
    """What one session's client received, over all of its sockets: every
    frame as read, before the client drops what a replay repeats."""

    session_id: str = ""
    seqs: dict[int, str] = field(default_factory=dict)  # seq -> event_id
    repeated: int = 0
    conflicting: int = 0
    resyncs: int = 0
    resumes: int = 0
    created: dict[str, float] = field(default_factory=dict)  # response id -> client time
    done: dict[str, str] = field(default_factory=dict)  # response id -> status
    # (client time, status, reason) of every response.done.
    outcomes: list[tuple[float, str, str]] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def last_seq(self) -> int:
        return max(self.seqs, default=0)

    def lost(self) -> int:
        return self.last_seq - len(self.seqs) + self.resyncs

    def stuck(self, before: float = float("inf")) -> int:
        return sum(1 for rid, t in self.created.items() if t < before and rid not in self.done)

    def frame(self, direction: str, ev: dict[str, Any]) -> None:
        """The client's `on_frame`: every frame in ("<") goes in the ledger."""
        if direction == "<":
            self.record(time.monotonic(), ev)

    def record(self, t: float, ev: dict[str, Any]) -> None:
        kind = ev.get("type", "")
        seq = ev.get("server_event_seq") or 0
        if kind not in UNJOURNALED and seq > 0:
            eid = ev.get("event_id", "")
            if seq in self.seqs:
                self.repeated += 1
                self.conflicting += self.seqs[seq] != eid
            else:
                self.seqs[seq] = eid
        if kind == "session.created":
            self.session_id = ev["session"]["id"]
        elif kind == "session.resync_required":
            self.resyncs += 1
        elif kind == "response.created":
            self.created.setdefault(ev["response"]["id"], t)
        elif kind == "response.done":
            r = ev["response"]
            self.done[r["id"]] = r.get("status", "")
            reason = (r.get("status_details") or {}).get("reason") or ""
            error = ((r.get("status_details") or {}).get("error") or {}).get("code") or ""
            self.outcomes.append((t, r.get("status", ""), error or reason))
        elif kind == "error":
            self.errors[(ev.get("error") or {}).get("code") or "error"] += 1
