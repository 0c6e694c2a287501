"""Sessions survive the death of any one process.

Real processes throughout: two session replicas and two gateways against
one Redis (AOF on) of their own, real gRPC and WebSockets; the stage
workers run the `synthetic` backends because the models are not what is
tested here.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
from collections.abc import Awaitable, Callable, Iterator

import grpc
import pytest
import redis.asyncio as aioredis

from antiphon.session.state import keys
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import session_pb2_grpc
from bench.lib.cluster import Cluster, running_cluster
from bench.lib.webrtc import Caller
from tests.support import tiers
from tests.support.polling import eventually
from tests.support.realtime import MANUAL, Event, RealtimeClient, of_type
from tests.support.speech import silence, spoken

pytestmark = pytest.mark.stack

MAX_SESSIONS = 5
GRACE_S = 2.0
REPLAY_TTL_S = 5.0


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    tiers.require(request, tiers.STACK, "starts a two-replica cluster")
    with running_cluster(
        max_sessions=MAX_SESSIONS, grace_s=GRACE_S, replay_ttl_s=REPLAY_TTL_S
    ) as c:
        yield c


def seqs(events: list[Event]) -> list[int]:
    return [e["server_event_seq"] for e in events if e["type"] != "session.resumed"]


async def open_client(cluster: Cluster, gateway: int = 1) -> tuple[RealtimeClient, Event]:
    client = await RealtimeClient.connect(cluster.url(gateway))
    created = await client.open(**MANUAL)
    assert created["type"] == "session.created", created
    return client, created


async def start_turn(client: RealtimeClient, text: str = "Tell me about the sea.") -> None:
    await client.append(spoken(text))
    await client.send("input_audio_buffer.commit")
    await client.send("response.create")


async def drop(client: RealtimeClient) -> None:
    """The network goes: the TCP connection dies with no close frame (a clean
    close would end the session: capacity follows the sockets)."""
    client.ws.transport.abort()
    with contextlib.suppress(Exception):
        await client.ws.wait_closed()


async def redis_holds(
    cluster: Cluster, fact: Callable[[aioredis.Redis], Awaitable[bool]], timeout_s: float = 30.0
) -> None:
    """Until `fact` holds in the cluster's Redis (TimeoutError after `timeout_s`: a hang)."""
    r = aioredis.Redis.from_url(cluster.stack.redis_url)
    try:
        await eventually(lambda: fact(r), timeout_s)
    finally:
        await r.aclose()


async def detached(cluster: Cluster, created: Event) -> None:
    """Until the session's owner has heard of the drop: detached, it gave its
    stage1 slot back (a response in flight ends first) and says so in Redis."""
    sid = created["session"]["id"]

    async def released(r: aioredis.Redis) -> bool:
        return await r.hget(keys.session(sid), "stage1") == b""  # type: ignore[misc]

    await redis_holds(cluster, released)


async def ended(cluster: Cluster, created: Event) -> None:
    """Until the session's cleanup has finished: its admission slot goes last."""
    sid = created["session"]["id"]

    async def released(r: aioredis.Redis) -> bool:
        return not await r.sismember(keys.ADMITTED, sid)  # type: ignore[misc]

    await redis_holds(cluster, released)


async def no_session_keys(r: aioredis.Redis) -> bool:
    async for _ in r.scan_iter(match=keys.EVERY_SESSION_KEY):
        return False
    return True


async def answers(r: aioredis.Redis) -> bool:
    """Redis is up with its data loaded (while loading its AOF it answers LOADING)."""
    try:
        return bool(await r.ping())
    except aioredis.RedisError:
        return False


async def resume(
    cluster: Cluster, created: Event, last_seq: int, *, gateway: int = 2, token: str = ""
) -> RealtimeClient:
    client = await RealtimeClient.connect(cluster.url(gateway, "?duplex=1&autostart=0"))
    await client.send(
        "session.resume",
        session_id=created["session"]["id"],
        incarnation=created["incarnation"],
        resume_token=token or created["resume_token"],
        last_received_server_event_seq=last_seq,
    )
    return client


@pytest.mark.models
async def test_a_dropped_socket_resumes_on_another_gateway_with_exact_replay(
    cluster: Cluster,
) -> None:
    client, created = await open_client(cluster, gateway=1)
    await start_turn(client)
    await client.until(lambda e: e["type"] == "response.output_audio.delta")
    seen = list(client.events)
    await drop(client)  # mid-response, no session.close
    await detached(cluster, created)
    again = await resume(cluster, created, seen[-1]["server_event_seq"], gateway=2)
    try:
        resumed = await again.until(lambda e: e["type"] in ("session.resumed", "error"))
        assert resumed["type"] == "session.resumed", resumed
        assert resumed["resume_token"] != created["resume_token"]
        rest = await again.response_cycle()
        # Every event exactly once, in order, with its original seq.
        assert seqs(seen + rest) == list(range(1, len(seqs(seen + rest)) + 1))
        # Detached, the session held no stage slot: the response ended there.
        done = of_type(rest, "response.done")[0]["response"]
        assert (done["status"], done["status_details"]["reason"]) == (
            "cancelled",
            "client_disconnected",
        )
        joined = "".join(
            e["delta"] for e in of_type(seen + rest, "response.output_audio_transcript.delta")
        )
        assert joined == of_type(rest, "response.output_audio_transcript.done")[0]["transcript"]
        # Bound again on resume: the next turn is answered whole.
        await start_turn(again, "And now?")
        nxt = await again.response_cycle()
        assert of_type(nxt, "response.done")[0]["response"]["status"] == "completed"
    finally:
        await again.close()


async def test_resume_with_a_wrong_token_is_refused_and_changes_nothing(cluster: Cluster) -> None:
    client, created = await open_client(cluster)
    try:
        bad = await resume(cluster, created, 0, token="rt_forged")
        err = await bad.until(lambda e: e["type"] == "error")
        assert err["error"]["code"] == "session_resume_refused"
        await bad.ws.close()
        # The attached socket was not disturbed.
        await client.send("session.heartbeat")
        await client.until(lambda e: e["type"] == "session.heartbeat_ack")
    finally:
        await client.close()


async def test_resume_after_the_grace_period_is_expired(cluster: Cluster) -> None:
    client, created = await open_client(cluster)
    await drop(client)
    await ended(cluster, created)  # its grace period ran out
    late = await resume(cluster, created, 2)
    try:
        err = await late.until(lambda e: e["type"] == "error")
        assert err["error"]["code"] == "session_resume_expired"
    finally:
        await late.ws.close()


@pytest.mark.models
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
async def test_a_gateway_that_drains_or_dies_is_not_a_client_close(
    cluster: Cluster, how: signal.Signals
) -> None:
    """Only the client ends its session by leaving: a gateway draining (its
    sockets close with 1012) or killed only detaches it, and it resumes."""
    client, created = await open_client(cluster, gateway=2)
    try:
        await client.send("session.heartbeat")
        ack = await client.until(lambda e: e["type"] == "session.heartbeat_ack")
        proc = cluster.stack.procs["gateway2"]
        proc.send_signal(how)
        proc.wait(30)
        again = await resume(cluster, created, ack["server_event_seq"], gateway=1)
        try:
            resumed = await again.until(lambda e: e["type"] in ("session.resumed", "error"))
            assert resumed["type"] == "session.resumed", resumed
            await start_turn(again)
            cycle = await again.response_cycle()
            assert of_type(cycle, "response.done")[0]["response"]["status"] == "completed"
        finally:
            await again.close()
    finally:
        cluster.stack.spawn_gateway("gateway2", cluster.gateway2)
        cluster.stack.wait_ready(60, gateway_port=cluster.gateway2)


async def test_a_takeover_replaces_the_old_socket_and_refuses_its_writes(cluster: Cluster) -> None:
    old, created = await open_client(cluster)
    new = await resume(cluster, created, 2, gateway=1)
    try:
        await new.until(lambda e: e["type"] == "session.resumed")
        replaced = await old.until(lambda e: e["type"] == "session.replaced")
        assert replaced["attachment_generation"] == 1
        # The old socket is closed: whatever it still tries to write is not applied.
        with pytest.raises(Exception):  # noqa: B017 - closed by the server
            await old.append(silence(200))
            await old.send("input_audio_buffer.commit")
            await old.recv(timeout=3)
        await new.send("session.heartbeat")
        await new.until(lambda e: e["type"] == "session.heartbeat_ack")
        assert not of_type(new.events, "input_audio_buffer.committed", "error")
    finally:
        await new.close()


@pytest.mark.models
async def test_kill_9_of_the_owning_replica_the_session_continues_on_another(
    cluster: Cluster,
) -> None:
    client, _created = await open_client(cluster, gateway=1)
    try:
        await start_turn(client)
        await client.until(lambda e: e["type"] == "response.output_audio.delta")
        cluster.stack.kill("session")  # replica A owned it
        cycle = await client.response_cycle(timeout=60)
        types = [e["type"] for e in cycle]
        assert "session.resumed" in types
        done = of_type(cycle, "response.done")[0]["response"]
        assert done["status"] in ("failed", "completed")
        if done["status"] == "failed":
            assert done["status_details"]["reason"] == "session_owner_changed"
        # The next turn works on replica B.
        await start_turn(client, "And now?")
        nxt = await client.response_cycle(timeout=60)
        assert of_type(nxt, "response.done")[0]["response"]["status"] == "completed"
        # Nothing received twice, nothing skipped.
        numbers = seqs(client.events)
        assert numbers == list(range(1, len(numbers) + 1))
    finally:
        await client.close()
        cluster.start_replica_a()
        cluster.stack.wait_ready(60)


async def test_a_socket_that_resumed_the_session_fails_over_like_the_first(
    cluster: Cluster,
) -> None:
    """The gateway resumes on the client's behalf from the cursor the client
    resumed at: nothing replayed twice, nothing skipped, then it carries on."""
    client, created = await open_client(cluster, gateway=1)
    await client.send("session.heartbeat")
    ack = await client.until(lambda e: e["type"] == "session.heartbeat_ack")
    await drop(client)
    again = await resume(cluster, created, ack["server_event_seq"], gateway=1)
    owner = ""
    try:
        await again.until(lambda e: e["type"] == "session.resumed")
        owner = await cluster.owner_of(created["session"]["id"])
        cluster.stack.kill(owner)
        await again.until(lambda e: e["type"] == "session.resumed", timeout=30)
        await again.send("session.heartbeat")
        # The first command after the fail-over reaches the new stream.
        await again.until(lambda e: e["type"] == "session.heartbeat_ack", timeout=10)
        numbers = seqs(client.events + again.events)
        assert numbers == list(range(1, len(numbers) + 1))
    finally:
        await again.close()
        if owner:
            cluster.restart(owner)
            cluster.stack.wait_ready(60)


async def test_the_replica_a_session_left_takes_it_back_with_the_current_token(
    cluster: Cluster,
) -> None:
    """The other replica resumes a session its owner still holds detached; the
    next resume reaches the first, whose copy is stale until its next lease
    renewal. It must yield to the current token, not refuse it."""
    client, created = await open_client(cluster, gateway=1)
    await client.send("session.heartbeat")
    ack = await client.until(lambda e: e["type"] == "session.heartbeat_ack")
    sid = created["session"]["id"]
    # Gateways try replica A first; B opened it only if A was out of reach.
    first_owner = await cluster.owner_of(sid)
    other = cluster.session_b if first_owner == "session" else cluster.stack.ports.session
    await drop(client)
    resume_b = spb.ClientCommand(
        client_type="session.resume",
        resume=spb.ResumeSession(
            session_id=sid,
            incarnation=created["incarnation"],
            resume_token=created["resume_token"],
            last_received_seq=ack["server_event_seq"],
        ),
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{other}") as channel:
        call = session_pb2_grpc.SessionServiceStub(channel).Connect()
        await call.write(resume_b)
        first = await asyncio.wait_for(call.read(), 10)
        assert first.WhichOneof("kind") == "session_resumed", first
        token = first.session_resumed.resume_token
        # Straight on, well inside A's lease renewal interval.
        again = await resume(cluster, created, ack["server_event_seq"], gateway=1, token=token)
        try:
            resumed = await again.until(lambda e: e["type"] in ("session.resumed", "error"))
            assert resumed["type"] == "session.resumed", resumed
            await again.send("session.heartbeat")
            await again.until(lambda e: e["type"] == "session.heartbeat_ack", timeout=10)
        finally:
            call.cancel()
            await again.close()


@pytest.mark.models
async def test_redis_restarted_between_turns_the_session_continues(cluster: Cluster) -> None:
    client, _ = await open_client(cluster)
    try:
        await start_turn(client)
        await client.response_cycle()
        cluster.stack.restart_redis()
        await redis_holds(cluster, answers)
        await start_turn(client, "Still there?")
        cycle = await client.response_cycle()
        assert of_type(cycle, "response.done")[0]["response"]["status"] == "completed"
        numbers = seqs(client.events)
        assert numbers == list(range(1, len(numbers) + 1))
    finally:
        await client.close()


async def test_a_duplicate_operation_id_append_is_applied_once(cluster: Cluster) -> None:
    client, _ = await open_client(cluster)
    try:
        second = silence(1000)
        for _ in range(2):
            await client.append(second, chunk_bytes=len(second), operation_id="op-same")
        await client.send("input_audio_buffer.commit")
        done = await client.until(
            lambda e: e["type"] == "conversation.item.input_audio_transcription.completed"
        )
        heard = re.search(r"(\d+) milliseconds", done["transcript"])
        assert heard is not None and 990 <= int(heard.group(1)) <= 1000
    finally:
        await client.close()


async def test_max_sessions_holds_across_two_replicas_under_50_concurrent_opens(
    cluster: Cluster,
) -> None:
    clients = [await RealtimeClient.connect(cluster.url(1 if i % 2 else 2)) for i in range(50)]
    try:
        answers = await asyncio.gather(*(c.open(**MANUAL) for c in clients))
        created = [
            c for c, a in zip(clients, answers, strict=True) if a["type"] == "session.created"
        ]
        refused = [a for a in answers if a["type"] == "error"]
        assert len(created) == MAX_SESSIONS
        assert {a["error"]["code"] for a in refused} == {"duplex_session_busy"}
        # A slot comes back once a session's cleanup has finished.
        await created[0].close()
        late = await RealtimeClient.connect(cluster.url(1))
        clients.append(late)
        assert (await late.open(**MANUAL))["type"] == "session.created"
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


async def test_redis_keys_return_to_baseline_after_200_sessions(cluster: Cluster) -> None:
    """What 200 closed sessions leave in Redis: nothing, once their replay TTL is
    over. (The replica's memory over such a churn is `make bench`'s to report.)"""
    r = aioredis.Redis.from_url(cluster.stack.redis_url)

    async def one() -> None:
        c = await RealtimeClient.connect(cluster.url(1))
        try:
            await c.open(**MANUAL)
            await c.append(silence(200))
        finally:
            await c.close()

    try:
        # Earlier tests' sessions expire (graces, then replay TTLs).
        await eventually(lambda: no_session_keys(r), timeout_s=60)
        keys_before = await r.dbsize()
        for _ in range(40):
            await asyncio.gather(*(one() for _ in range(MAX_SESSIONS)))
        await eventually(lambda: no_session_keys(r), timeout_s=REPLAY_TTL_S + 30)
        assert await r.dbsize() <= keys_before
        assert await r.scard(keys.ADMITTED) == 0
    finally:
        await r.aclose()


async def test_a_resume_the_journal_cannot_fill_requires_resync(cluster: Cluster) -> None:
    client, created = await open_client(cluster)
    for _ in range(3):
        await client.send("session.heartbeat")
    last = await client.until(lambda e: e["server_event_seq"] == 5)
    await client.send("session.event_ack", server_event_seq=last["server_event_seq"])
    await client.send("session.heartbeat")  # ordered after the ack in the mailbox
    await client.until(lambda e: e["server_event_seq"] == 6)
    await drop(client)
    again = await resume(cluster, created, 1)  # events 2..5 were acked and trimmed
    try:
        resync = await again.until(lambda e: e["type"] == "session.resync_required")
        assert resync["reason"] == "journal_gap"
    finally:
        await again.ws.close()
    fresh = await resume(cluster, created, 5, token=resumed_token(again))
    try:
        await fresh.until(lambda e: e["type"] == "session.resumed")
        replayed = await fresh.until(lambda e: e["type"] == "session.heartbeat_ack")
        assert replayed["server_event_seq"] == 6
    finally:
        await fresh.close()


def resumed_token(client: RealtimeClient) -> str:
    return str(of_type(client.events, "session.resumed")[0]["resume_token"])


async def test_a_call_resumes_its_session_by_a_new_call_after_its_gateway_dies(
    cluster: Cluster,
) -> None:
    """A WebRTC call in the duplex dialect (`?duplex=1` on the offer's URL):
    its gateway is killed, and a new call to another gateway resumes the
    session with `session.resume` on the data channel; the next answer
    plays on the new call."""
    gateway1 = f"http://127.0.0.1:{cluster.stack.ports.gateway}"
    gateway2 = f"http://127.0.0.1:{cluster.gateway2}"
    first = await Caller.dial(gateway2, query="?duplex=1", session={"type": "realtime"})
    try:
        created = await first.wait_for("session.created")
        first.send({"type": "session.heartbeat"})
        ack = await first.wait_for("session.heartbeat_ack")
        proc = cluster.stack.procs["gateway2"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        again = await Caller.dial(gateway1, query="?duplex=1&autostart=0")
        try:
            again.send(
                {
                    "type": "session.resume",
                    "session_id": created["session"]["id"],
                    "incarnation": created["incarnation"],
                    "resume_token": created["resume_token"],
                    "last_received_server_event_seq": ack["server_event_seq"],
                }
            )
            resumed = await again.wait_for("session.resumed")
            assert resumed["session_id"] == created["session"]["id"]
            started = await again.answer_played()
            assert again.heard.loud_after(started["_at"] - 0.5) is not None
        finally:
            await again.hang_up()
    finally:
        await first.hang_up()
        cluster.stack.spawn_gateway("gateway2", cluster.gateway2)
        cluster.stack.wait_ready(60, gateway_port=cluster.gateway2)
