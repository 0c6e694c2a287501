"""The durable part of a session: what another replica needs to take it over.

The owner writes it to the session hash in Redis whenever it changes (the
journal's `seq` is written by the journal script itself); a replica taking
the session over rebuilds its actor from it.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb


def token_hash(token: str) -> str:
    """Resume tokens are stored hashed: reading Redis does not let one resume."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, stored_hash: str) -> bool:
    return bool(stored_hash) and hmac.compare_digest(token_hash(token), stored_hash)


def resumes(req: spb.ResumeSession, incarnation: int, stored_hash: str) -> bool:
    """Whether a resume names this incarnation of the session, with its token."""
    return req.incarnation == incarnation and token_matches(req.resume_token, stored_hash)


@dataclass
class Snapshot:
    session_id: str
    incarnation: int
    config: cpb.SessionConfig
    seq: int = 0
    epoch: int = 0
    turn_id: int = 0
    attachment: int = 0
    last_item_id: str = ""
    token_hash: str = ""
    # The response in flight, if any: a successor must end it.
    active_response: spb.Response | None = None
    # When the session opened (wall clock, ms: every replica reads the same
    # clock), for its maximum duration; written once, at the open. 0: unknown.
    created_ms: int = 0

    def fields(self) -> dict[str, bytes | str]:
        return {
            "config": self.config.SerializeToString(),
            "epoch": str(self.epoch),
            "turn_id": str(self.turn_id),
            "attachment": str(self.attachment),
            "last_item_id": self.last_item_id,
            "token_hash": self.token_hash,
            "active_response": (
                self.active_response.SerializeToString() if self.active_response else b""
            ),
        }

    @classmethod
    def from_fields(cls, session_id: str, raw: dict[bytes, bytes]) -> Snapshot:
        def text(name: str, default: str = "") -> str:
            value = raw.get(name.encode())
            return value.decode() if value is not None else default

        active = raw.get(b"active_response") or b""
        return cls(
            session_id=session_id,
            incarnation=int(text("incarnation", "0")),
            config=cpb.SessionConfig.FromString(raw.get(b"config", b"")),
            seq=int(text("seq", "0")),
            epoch=int(text("epoch", "0")),
            turn_id=int(text("turn_id", "0")),
            attachment=int(text("attachment", "0")),
            last_item_id=text("last_item_id"),
            token_hash=text("token_hash"),
            active_response=spb.Response.FromString(active) if active else None,
            created_ms=int(text("created_ms", "0")),
        )
