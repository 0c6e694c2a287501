"""Every event type of `reference/realtime-duplex-api.md` is accepted or emitted, and tested.

The catalogue is read from the reference itself (21 client->server types, 42
server->client, the input aliases, and the native name map) and diffed
against (a) what the gateway accepts (the translator) and projects (the
projector's wire types), and (b) what the tests do with each type: a frame
of it in a golden transcript (compared on every run), or a test that sends
it or asserts on it (`_used_in_tests`). A name that a test file merely
mentions (a docstring, a table nothing checks) is no evidence. The
allow-lists below name the types our backends cannot produce; each entry must
really be missing, so the lists cannot outlive the gap they describe.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from antiphon.gateway.dialects import native
from antiphon.gateway.dialects.projector import _PROJECTIONS
from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate.translator import Translator, canonical_type
from antiphon.v1 import session_pb2 as spb
from tests.support import golden, reference

TESTS = Path(__file__).resolve().parent
# Files that name every type by construction, so they prove nothing about use.
NOT_EVIDENCE = {TESTS / "test_catalogue.py", TESTS / "support" / "reference.py"}

# Server types no ServerEvent kind produces, because no backend here can:
NOT_PROJECTED = {
    # A diagnostic for an engine control signal the model runtime partially refused;
    # our stage backends take no engine control signals.
    "runtime.control": "capability: engine control signals",
}
# Types no test can see on the wire, for the same reasons.
NOT_IN_TESTS = dict(NOT_PROJECTED)
# Client types the translator refuses (none: every one is accepted).
NOT_ACCEPTED: dict[str, str] = {}
# Native names of the map that no typed event projects to.
NATIVE_NOT_PROJECTED = {
    # The chat-fallback lane's raw chunk; our backends stream typed deltas instead.
    "response.message": "no chat-fallback lane",
    "runtime.control": NOT_PROJECTED["runtime.control"],
}
# Client event codes that mean "this type is not accepted at all".
REFUSED = {"invalid_event", "unsupported_event"}


def _accepted(event_type: str) -> bool:
    """Whether the gateway takes this type: a bare event of it is translated or
    refused only for its payload, never for its type."""
    translator = Translator()
    try:
        if event_type == "session.resume":
            # Valid only as the first event of a connection (the handshake).
            translator.open({"type": event_type}, {})
        else:
            translator.translate({"type": event_type})
    except ClientError as err:
        return err.code not in REFUSED
    return True


def _projected() -> set[str]:
    return {wire for wire, _ in _PROJECTIONS.values()}


def _golden_types() -> set[str]:
    """The type of every frame of every golden transcript."""
    return {
        frame["type"]
        for dialect in golden.DIALECTS
        for frames in golden.transcripts(dialect).values()
        for frame in frames
    }


def _used_in_tests() -> set[str]:
    """The strings a test sends or asserts on, over every test file."""
    used: set[str] = set()
    for path in TESTS.rglob("*.py"):
        if path not in NOT_EVIDENCE:
            used |= _used(ast.parse(path.read_text(encoding="utf-8")))
    return used


def _used(module: ast.Module) -> set[str]:
    """The strings of one file that are sent or checked: those inside an `assert` or
    a comparison (a predicate such as `e["type"] == ...`), the first argument of a
    `send(...)`, the `"type"` of a frame written as a dict, and the values a test is
    parametrized with. A module-level name in such a place stands for its value."""
    constants = {
        target.id: node.value
        for node in module.body
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    used: set[str] = set()

    def strings(node: ast.AST, seen: frozenset[str] = frozenset()) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                used.add(sub.value)
            elif isinstance(sub, ast.Name) and sub.id in constants and sub.id not in seen:
                strings(constants[sub.id], seen | {sub.id})

    for node in ast.walk(module):
        if isinstance(node, ast.Assert | ast.Compare):
            strings(node)
        elif isinstance(node, ast.Call) and _called(node) == "send" and node.args:
            strings(node.args[0])
        elif isinstance(node, ast.Call) and _called(node) == "parametrize":
            for values in node.args[1:]:
                strings(values)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "type":
                    strings(value)
    return used


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


# ------------------------------------------------------------------- parsing
def test_the_reference_catalogue_parses_to_its_stated_counts() -> None:
    stated = re.search(
        r"(\d+)\s+client→server and (\d+) server→client", reference.document(reference.API)
    )
    assert stated is not None
    assert (len(reference.client_types()), len(reference.server_types())) == (21, 42)
    assert (int(stated.group(1)), int(stated.group(2))) == (21, 42)
    assert len(set(reference.client_types())) == 21
    assert len(set(reference.server_types())) == 42
    assert len(reference.aliases()) == 9


def test_allow_lists_name_only_reference_types() -> None:
    server = set(reference.server_types())
    assert set(NOT_PROJECTED) <= server
    assert set(NOT_IN_TESTS) <= server | set(reference.client_types()) | set(reference.aliases())
    assert set(NOT_ACCEPTED) <= set(reference.client_types()) | set(reference.aliases())


# ------------------------------------------------------ (a) gateway surface
def test_every_client_type_and_alias_is_accepted() -> None:
    types = reference.client_types() + reference.aliases()
    missing = {t for t in types if not _accepted(t)}
    assert missing == set(NOT_ACCEPTED)


def test_aliases_normalise_to_the_reference_canonical_type() -> None:
    table = reference.alias_table()
    assert set(table) <= set(reference.aliases())
    for alias, canonical in table.items():
        assert canonical_type({"type": alias}) == canonical, alias
    # The catalogue lists `session_close` beside the table's close aliases.
    assert canonical_type({"type": "session_close"}) == "session.close"
    # `input.commit` is in the client table as the runner's alias of the commit.
    assert canonical_type({"type": "input.commit"}) == "input_audio_buffer.commit"


def test_every_server_type_is_projected() -> None:
    missing = set(reference.server_types()) - _projected()
    assert missing == set(NOT_PROJECTED)


def test_the_projector_emits_no_type_outside_the_reference() -> None:
    assert _projected() <= set(reference.server_types()) | set(reference.BEYOND_CATALOGUE)


# ----------------------------------------------------------- (b) the tests
def test_every_reference_type_is_sent_or_checked_by_some_test() -> None:
    evidence = _golden_types() | _used_in_tests()
    types = reference.client_types() + reference.aliases() + reference.server_types()
    missing = {t for t in types if t not in evidence}
    assert missing == set(NOT_IN_TESTS)


# A test file as `_used` reads it: what it sends and checks, beside what it only names.
_SAMPLE = '''
"""A docstring naming session.expired."""
TABLE = ["runtime.control"]
CHECKED = {"input.cancel"}
NOTED = "response.listen"

@pytest.mark.parametrize("etype", ["push_text"])
async def test_x(client, etype):
    frame = {"type": "signal_turn", "note": "close_session"}
    await client.send("barge_in")
    await client.until(lambda e: e["type"] == "session.replaced")
    assert "playback.ack" in CHECKED
    log(NOTED, TABLE)
'''


def test_a_mention_alone_is_no_evidence() -> None:
    used = _used(ast.parse(_SAMPLE))
    sent_or_checked = {"push_text", "signal_turn", "barge_in", "session.replaced", "playback.ack"}
    assert sent_or_checked <= used
    assert "input.cancel" in used  # a module constant, named in an assert
    assert not {"session.expired", "runtime.control", "response.listen", "close_session"} & used


# ---------------------------------------------------------- native dialect
def _native_outputs() -> set[str]:
    out: set[str] = set()
    for field in spb.ServerEvent.DESCRIPTOR.oneofs_by_name["kind"].fields:
        ev = spb.ServerEvent(seq=1, event_id="e")
        getattr(ev, field.name).SetInParent()
        out.add(native.project_native(ev)["type"])
    cancelled = spb.ServerEvent(seq=1, event_id="e")
    cancelled.response_done.response.status = "cancelled"
    out.add(native.project_native(cancelled)["type"])
    return out


def test_every_native_name_of_the_map_is_accepted_or_projected() -> None:
    rows = reference.native_map()
    inbound = {
        name for names, projected in rows for name in names if projected == ["session.update"]
    }
    assert inbound == set(native.INPUT_NAMES)
    assert all(native.normalize({"type": n})["type"] == "session.update" for n in inbound)
    outbound = {name for names, _ in rows for name in names} - inbound
    assert outbound - _native_outputs() == set(NATIVE_NOT_PROJECTED)
