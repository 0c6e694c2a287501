"""No session part writes another part's facts: each is the one writer of
its own, and the others ask it or tell it what happened (a method call).

A part's peers are what its `__init__` keeps from its arguments or builds
itself (`self._turns = turns`, `self._input = InputBuffer(...)`). Writing
through a peer (`self._turns.last_item_id = ...`, `self._links.unbound.clear()`,
`self._turns.turn_id += 1`, `del self._links.x[k]`, also through a local
alias of the peer, or through an argument of a class some part holds as a
peer: `def f(self, turns: Turns)`) is what this test refuses; calling the
peer's own methods (`self._turns.item_added(...)`) is how parts talk.
Records a part owns (a `ResponseState`, a proto it builds) are its own.

Writes through methods count too: a method of an object reached through a
peer (`self._responses.ledger(...).acknowledge(...)`, also through a local
name), or of a record another part keeps (`RECORDS`: a `Ledger` handed in),
other than a read (`READS`). Metrics are a sink every part writes.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

SESSION = Path(__file__).resolve().parents[2] / "services" / "session" / "antiphon" / "session"
# Methods that change the collection they are called on.
MUTATORS = frozenset(
    {
        "append",
        "extend",
        "insert",
        "remove",
        "pop",
        "popitem",
        "clear",
        "update",
        "setdefault",
        "add",
        "discard",
        "sort",
        "reverse",
    }
)
# Methods that only read what they are called on (protobuf messages, str,
# the containers' lookups): callable on what a peer hands out.
READS = frozenset(
    {
        "HasField",
        "WhichOneof",
        "SerializeToString",
        "ByteSize",
        "ListFields",
        "get",
        "keys",
        "values",
        "items",
        "copy",
        "count",
        "index",
        "startswith",
        "endswith",
        "strip",
        "rstrip",
        "lstrip",
        "split",
        "join",
        "lower",
        "upper",
        "encode",
        "decode",
        "format",
        "isoformat",
        "playback",  # a Ledger's positions, as a proto
    }
)
# Records one part keeps and changes, with the classes that may change them:
# handed to any other, they are read only (conversation.py once marked a
# ledger stored).
RECORDS = {
    "Ledger": frozenset({"ResponseControl", "ResponseState", "Playback"}),
    # A delegated answer's is its delegate's own (assistant/delegate.py).
    "ResponseState": frozenset({"ResponseControl", "Delegate"}),
}
RECORD_ARGS = frozenset({("<record>",)})
# What every part writes to and none reads: counters, not facts.
SINKS = frozenset({"SessionMetrics", "Counter", "Histogram", "Gauge"})
Chain = tuple[str, ...]


def _names(annotation: ast.expr | None) -> set[str]:
    """The class names an annotation gives (`Turns`, `Ledger | None`)."""
    if isinstance(annotation, ast.Name):
        return {annotation.id}
    if isinstance(annotation, ast.BinOp):
        return _names(annotation.left) | _names(annotation.right)
    return set()


def _init(cls: ast.ClassDef) -> ast.FunctionDef | None:
    return next(
        (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
    )


def part_types(sources: list[str]) -> frozenset[str]:
    """The classes some part holds as a peer: what a method must not write
    through either, when it is handed one (`def f(self, turns: Turns)`)."""
    types: set[str] = set()
    for source in sources:
        for cls in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)):
            for peer_types in _peers(cls).values():
                types |= peer_types
    return frozenset(types - SINKS)


def _peers(cls: ast.ClassDef) -> dict[str, set[str]]:
    """The attributes `__init__` sets from an argument, to an object it
    builds, or to one a builder it called made, each with the classes it is
    (as annotated, or as built; unknown from a builder)."""
    init = _init(cls)
    if init is None:
        return {}
    args = {a.arg: _names(a.annotation) for a in [*init.args.args, *init.args.kwonlyargs]}
    args.pop("self", None)
    peers: dict[str, set[str]] = {}
    for node in ast.walk(init):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if isinstance(value, ast.Name) and value.id in args:
            types = args[value.id]
        elif (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id[:1].isupper()
        ):
            types = {value.func.id}
        elif (
            isinstance(value, ast.Attribute)
            and isinstance(value.value, ast.Name)
            and value.value.id not in ("self", *args)
        ):
            # One of the parts a builder made (`self._turns = parts.turns`).
            types = set()
        else:
            continue
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                if not types & SINKS:
                    peers[target.attr] = {t for t in types if t[:1].isupper() and t != "Any"}
    return peers


def _chain(node: ast.expr, aliases: dict[str, Chain]) -> Chain | None:
    """`self._turns.text[...]` as ("self", "_turns", "text", "[]"); a local
    alias stands for what it was assigned."""
    if isinstance(node, ast.Name):
        if node.id == "self":
            return ("self",)
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _chain(node.value, aliases)
        return None if base is None else (*base, node.attr)
    if isinstance(node, ast.Subscript):
        base = _chain(node.value, aliases)
        return None if base is None else (*base, "[]")
    if isinstance(node, ast.Call):
        # What a peer's method returns may be a peer's own object too.
        base = _chain(node.func, aliases)
        return None if base is None else (*base, "()")
    if isinstance(node, ast.Await):
        return _chain(node.value, aliases)
    return None


def _through_peer(chain: Chain | None, peers: set[str]) -> bool:
    """Whether `chain` reaches inside a peer (more than the peer itself)."""
    return chain is not None and len(chain) >= 3 and chain[0] == "self" and chain[1] in peers


def _targets(node: ast.expr) -> list[ast.expr]:
    """An assignment's targets, unpacked (`a.x, a.y = ...` writes two)."""
    if isinstance(node, ast.Tuple | ast.List):
        return [t for element in node.elts for t in _targets(element)]
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    return [node]


def _writes(node: ast.AST, aliases: dict[str, Chain], peers: set[str]) -> list[str]:
    """What `node` writes through a peer, as source text."""
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr not in READS:
            # A method of an object reached through a peer (its record, its
            # ledger, a collection it keeps) may change it: only the peer's
            # own methods are how parts talk.
            chain = _chain(func.value, aliases)
            if _through_peer(chain, peers) or (chain is not None and chain[-1:] in RECORD_ARGS):
                return [ast.unparse(node)]
        elif isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
            chain = _chain(node.args[0], aliases)
            # The attribute it names is one more link.
            if chain is not None and _through_peer((*chain, "?"), peers):
                return [ast.unparse(node)]
        return []
    if isinstance(node, ast.Assign | ast.Delete):
        targets = [t for target in node.targets for t in _targets(target)]
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        targets = _targets(node.target)
    else:
        return []
    # A plain name is a local rebound: nobody's fact.
    return [
        ast.unparse(t)
        for t in targets
        if not isinstance(t, ast.Name) and _through_peer(_chain(t, aliases), peers)
    ]


def foreign_writes(
    source: str, filename: str = "<source>", handed: frozenset[str] = frozenset()
) -> list[str]:
    """Each write through a peer in `source`, as `file:line: what`; a method's
    argument of a class in `handed` (see `part_types`) is a peer too."""
    found: list[tuple[int, str]] = []
    for cls in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)):
        held = set(_peers(cls))
        for method in cls.body:
            if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            peers = set(held)
            aliases: dict[str, Chain] = {}
            records = {t for t, owners in RECORDS.items() if cls.name not in owners}
            for arg in [*method.args.args, *method.args.kwonlyargs]:
                if _names(arg.annotation) & records:
                    # Not even its own methods: they change it.
                    aliases[arg.arg] = ("self", "<record>")
                    peers.add("<record>")
                elif _names(arg.annotation) & handed:
                    aliases[arg.arg] = ("self", f"<{arg.arg}>")
                    peers.add(f"<{arg.arg}>")
            for node in ast.walk(method):
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    (target,) = node.targets
                    chain = _chain(node.value, aliases)
                    if isinstance(target, ast.Name) and chain is not None and chain[0] == "self":
                        aliases[target.id] = chain
            for node in ast.walk(method):
                for what in _writes(node, aliases, peers):
                    line = getattr(node, "lineno", 0)
                    found.append((line, f"{cls.name} writes {what}"))
    return [f"{filename}:{line}: {what}" for line, what in sorted(found)]


def test_no_session_part_writes_another_parts_attributes() -> None:
    sources = {
        str(path.relative_to(SESSION)): path.read_text() for path in sorted(SESSION.rglob("*.py"))
    }
    handed = part_types(list(sources.values()))
    assert {"Turns", "StageLinks", "ResponseControl", "InputBuffer"} <= handed
    found: list[str] = []
    for name, source in sources.items():
        found += foreign_writes(source, name, handed)
    assert found == []


PLANTED = textwrap.dedent(
    """
    class Edits:
        def __init__(self, *, turns, links, settings, metrics: SessionMetrics):
            self._turns = turns
            self._links = links
            self._metrics = metrics
            self._input = InputBuffer(settings.limit)
            self._active = None
            self._calls = []

        async def create(self, item):
            self._turns.last_item_id = item.id
            self._turns.turn_id += 1
            self._links.unbound.clear()
            del self._links.bindings["stage0"]
            self._input.pending_bytes = 0
            turns = self._turns
            turns.pending[item.id] = item
            setattr(turns, "text", [])
            self._turns.speech_item_id, local = "", 0

        def handed_one(self, links: StageLinks | None, ledger: Ledger):
            links.epoch += 1
            ledger.in_history = True

        async def through_methods(self, item):
            ledger = self._turns.ledger(item_id=item.id)
            ledger.acknowledge(1, 2)
            self._links.active.settle("done")
            (await self._turns.record()).stored()

        async def fine(self, item):
            self._turns.item_added(item.id)
            self._links.forget_unbound()
            self._active = item
            self._active.status = "done"
            self._calls.append(item)
            self._links.capabilities.HasField("x")
            self._metrics.errors.labels("x").inc()
            local = []
            local.append(item)
    """
)


def test_the_check_catches_each_kind_of_write_through_a_peer_and_only_those() -> None:
    found = foreign_writes(PLANTED, handed=frozenset({"StageLinks"}))
    writes = [line.split(" writes ", 1)[1] for line in found]
    assert writes == [
        "self._turns.last_item_id",
        "self._turns.turn_id",
        "self._links.unbound.clear()",
        "self._links.bindings['stage0']",
        "self._input.pending_bytes",
        "turns.pending[item.id]",
        "setattr(turns, 'text', [])",
        "self._turns.speech_item_id",
        "links.epoch",
        "ledger.in_history",
        "ledger.acknowledge(1, 2)",
        "self._links.active.settle('done')",
        "(await self._turns.record()).stored()",
    ]


@pytest.mark.parametrize(
    "line",
    [
        # conversation/edits.py and assistant/response_control.py, before:
        "self._turns.last_item_id = item_id",
        "self._turns.text.append(text)",  # actor/actor.py, before
        "self._turns.text.clear()",  # user/listening.py, before
        "self._turns.pending.clear()",  # stage/stage_events.py, before
        "self._links.unbound.clear()",  # actor/actor.py, before
    ],
)
def test_the_writes_issue_28_found_would_fail_the_check(line: str) -> None:
    source = (
        "class Part:\n"
        "    def __init__(self, turns, links):\n"
        "        self._turns = turns\n"
        "        self._links = links\n"
        "    def handle(self, item_id, text):\n"
        f"        {line}\n"
    )
    assert len(foreign_writes(source)) == 1


@pytest.mark.parametrize(
    ("args", "lines"),
    [
        # conversation/edits.py, before: a ledger got from ResponseControl acknowledged.
        ("", ["ledger = self._responses.ledger(item_id=item_id)", "ledger.acknowledge(1, 2)"]),
        # conversation/conversation.py, before: a ledger handed in, marked stored.
        (", ledger: Ledger", ["ledger.stored()"]),
        # ResponseControl.active handed its mutable ResponseState out.
        ("", ["r = self._responses.active", "r.settle('done')"]),
    ],
)
def test_the_writes_through_methods_issue_47_found_would_fail_the_check(
    args: str, lines: list[str]
) -> None:
    body = "".join(f"        {line}\n" for line in lines)
    source = (
        "class Part:\n"
        "    def __init__(self, responses):\n"
        "        self._responses = responses\n"
        f"    async def handle(self, item_id{args}):\n"
        f"{body}"
    )
    assert len(foreign_writes(source)) == 1


def test_a_part_a_builder_made_is_a_peer_too() -> None:
    source = (
        "class Actor:\n"
        "    def __init__(self, store):\n"
        "        parts = wiring.wire(store=store)\n"
        "        self._turns = parts.turns\n"
        "        self._closed = asyncio.Event()\n"
        "    def handle(self, item_id):\n"
        "        self._turns.last_item_id = item_id\n"
        "        self._closed.set()\n"
    )
    assert [f.split(" writes ")[1] for f in foreign_writes(source)] == ["self._turns.last_item_id"]
