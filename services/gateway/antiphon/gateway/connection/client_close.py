"""How a client's socket ended, told to its session as `ClientGone`.

A close frame with 1000 (normal closure) or 1001 (going away: a page
unloading, an app quitting) is the client saying goodbye, as OpenAI's
clients do when they are done: the session ends at once, unless the client
made it resumable. Everything else only detaches the session, resumable for
its grace period: a connection lost with no close frame (1006), an error
code, or our own server going away (1012, a gateway draining).

A close frame with no status code (1005, a browser's bare `ws.close()`) is
a drop too: uvicorn reports a lost connection with the same 1005, so the two
cannot be told apart here. A client that means to end its session sends 1000
or `session.close`.
"""

from __future__ import annotations

from antiphon.v1 import session_pb2 as spb

CLEAN_CLOSE_CODES = frozenset({1000, 1001})


def client_gone(code: int) -> spb.ClientCommand:
    """The command that tells the session its client's socket closed with `code`."""
    return spb.ClientCommand(
        client_type="websocket.close",
        client_gone=spb.ClientGone(clean=code in CLEAN_CLOSE_CODES, close_code=code),
    )


def is_last(cmd: spb.ClientCommand) -> bool:
    """Nothing follows this command on the stream: the client is gone."""
    kind: str | None = cmd.WhichOneof("kind")
    return kind == "client_gone"
