"""Keys and client secrets on a live gateway, as OpenAI does them.

A backend mints a secret with the official SDK
(`client.realtime.client_secrets.create`), a browser-style client opens a
session with it through OpenAI's subprotocol, and the secret's session
config holds against the client's `session.update`. Missing, wrong, forged
and expired credentials and foreign Origins are refused on the upgrade
itself (HTTP 401 / 403, OpenAI's error JSON): no socket, so no session.
Per-key limits answer 429, and a secret counts against its minting key.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets
from openai import AsyncOpenAI
from openai.types.realtime import ClientSecretCreateResponse
from prometheus_client.parser import text_string_to_metric_families
from stack import LocalStack
from websockets.typing import Subprotocol

from antiphon.gateway.edge.client_secrets import SecretSigner, signing_key
from antiphon.gateway.edge.credentials import key_hash, key_id
from tests.support import auth
from tests.support.polling import eventually
from tests.support.realtime import RealtimeClient, realtime_url

pytestmark = pytest.mark.stack

PINNED = {
    "type": "realtime",
    "instructions": "Only ever talk about trains.",
    "output_modalities": ["text"],
}


def _origin(stack: LocalStack) -> str:
    return f"http://127.0.0.1:{stack.ports.gateway}"


async def _socket(
    stack: LocalStack,
    *,
    protocols: list[str] | None = None,
    headers: dict[str, str] | None = None,
) -> RealtimeClient:
    ws = await websockets.connect(
        realtime_url(stack.ports.gateway),
        subprotocols=[Subprotocol(p) for p in protocols] if protocols is not None else None,
        additional_headers=headers,
        max_size=None,
    )
    return RealtimeClient(ws, duplex=False)


async def _refused(stack: LocalStack, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    """The HTTP status and error body of an upgrade the gateway refused."""
    with pytest.raises(websockets.InvalidStatus) as refused:
        client = await _socket(stack, **kwargs)
        await client.ws.close()
    response = refused.value.response
    return response.status_code, json.loads(response.body or b"{}")


async def _mint(stack: LocalStack, key: str, **create: Any) -> ClientSecretCreateResponse:
    sdk = AsyncOpenAI(api_key=key, base_url=f"{stack.gateway_url}/v1", max_retries=0)
    try:
        return await sdk.realtime.client_secrets.create(**create)
    finally:
        await sdk.close()


@pytest.fixture
async def http(auth_stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=auth_stack.gateway_url) as client:
        yield client


async def _refusals(http: httpx.AsyncClient) -> dict[str, float]:
    text = (await http.get("/metrics")).text
    return {
        s.labels["reason"]: s.value
        for family in text_string_to_metric_families(text)
        if family.name == "antiphon_gateway_refusals"
        for s in family.samples
        if s.name.endswith("_total")
    }


async def test_a_secret_minted_with_the_sdk_opens_a_session_from_a_browser_style_client(
    auth_stack: LocalStack,
) -> None:
    before = int(time.time())
    minted = await _mint(
        auth_stack,
        auth.ALPHA,
        expires_after={"anchor": "created_at", "seconds": 120},
        session=PINNED,
    )
    # What a strict client of OpenAI's API would accept.
    ClientSecretCreateResponse.model_validate(minted.model_dump(mode="json"), strict=True)
    assert minted.value.startswith("ek_")
    assert before + 120 <= minted.expires_at <= int(time.time()) + 120
    assert minted.session.type == "realtime"
    assert minted.session.instructions == PINNED["instructions"]

    client = await _socket(
        auth_stack,
        protocols=auth.browser_protocols(minted.value),
        headers={"Origin": _origin(auth_stack)},
    )
    try:
        assert client.ws.subprotocol == "realtime"  # never the credential
        created = await client.until(lambda e: e["type"] in ("session.created", "error"))
        assert created["type"] == "session.created", created
        assert created["session"]["instructions"] == PINNED["instructions"]
        assert created["session"]["output_modalities"] == ["text"]
    finally:
        await client.close()


async def test_a_secret_opens_sessions_until_it_expires(auth_stack: LocalStack) -> None:
    minted = await _mint(auth_stack, auth.ALPHA, expires_after={"seconds": 60})
    for _ in range(2):
        client = await _socket(auth_stack, protocols=auth.browser_protocols(minted.value))
        try:
            created = await client.until(lambda e: e["type"] in ("session.created", "error"))
            assert created["type"] == "session.created", created
        finally:
            await client.close()


async def test_the_secrets_config_holds_against_the_clients_session_update(
    auth_stack: LocalStack,
) -> None:
    minted = await _mint(auth_stack, auth.ALPHA, session=PINNED)
    client = await _socket(auth_stack, protocols=auth.browser_protocols(minted.value))
    try:
        await client.until(lambda e: e["type"] == "session.created")
        await client.send(
            "session.update",
            event_id="evt_raise",
            session={"type": "realtime", "instructions": "Talk about anything."},
        )
        error = await client.until(lambda e: e["type"] in ("error", "session.updated"))
        assert error["type"] == "error", error
        assert error["error"]["code"] == "session_config_pinned"
        assert error["error"]["param"] == "session.instructions"
        assert error["error"]["event_id"] == "evt_raise"
        # Resending the pinned value and setting what the minter left open passes.
        await client.send(
            "session.update",
            session={"type": "realtime", **PINNED, "audio": {"input": {"turn_detection": None}}},
        )
        updated = await client.until(lambda e: e["type"] in ("error", "session.updated"))
        assert updated["type"] == "session.updated", updated
        assert updated["session"]["instructions"] == PINNED["instructions"]
        assert updated["session"]["audio"]["input"]["turn_detection"] is None
    finally:
        await client.close()


async def test_missing_wrong_forged_and_expired_credentials_get_401_on_the_upgrade(
    auth_stack: LocalStack, http: httpx.AsyncClient
) -> None:
    kid = key_id(key_hash(auth.ALPHA))
    expired, _ = SecretSigner(signing_key(auth.SIGNING_KEY)).mint(kid, 10, {}, now=time.time() - 60)
    forged, _ = SecretSigner(signing_key("not the gateway's")).mint(kid, 600, {})
    before = await _refusals(http)
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "missing_api_key"),
        ({"headers": {"Authorization": "Bearer sk-wrong"}}, "invalid_api_key"),
        ({"protocols": auth.browser_protocols("sk-wrong")}, "invalid_api_key"),
        ({"protocols": auth.browser_protocols(forged)}, "invalid_api_key"),
        ({"protocols": auth.browser_protocols(expired)}, "client_secret_expired"),
    ]
    for kwargs, code in cases:
        status, body = await _refused(auth_stack, **kwargs)
        assert (status, body["error"]["code"]) == (401, code), (kwargs, body)
        assert body["error"]["type"] == "invalid_request_error"
    after = await _refusals(http)
    grew = {r: after.get(r, 0) - before.get(r, 0) for r in after}
    assert grew["missing_credential"] == 1 and grew["expired_secret"] == 1, grew
    assert grew["invalid_credential"] == 3, grew


async def test_every_configured_key_opens_by_header_and_by_subprotocol(
    auth_stack: LocalStack,
) -> None:
    ways: list[dict[str, Any]] = [
        {"headers": {"Authorization": f"Bearer {auth.SINGLE_KEY}"}},
        {"protocols": auth.browser_protocols(auth.SINGLE_KEY)},
        {"headers": {"Authorization": f"Bearer {auth.ALPHA}"}},
    ]
    for kwargs in ways:
        client = await _socket(auth_stack, **kwargs)
        try:
            created = await client.until(lambda e: e["type"] in ("session.created", "error"))
            assert created["type"] == "session.created", (kwargs, created)
        finally:
            await client.close()


async def test_a_foreign_origin_is_refused_with_403(
    auth_stack: LocalStack, http: httpx.AsyncClient
) -> None:
    status, body = await _refused(
        auth_stack,
        protocols=auth.browser_protocols(auth.ALPHA),
        headers={"Origin": "https://evil.example.com"},
    )
    assert (status, body["error"]["code"]) == (403, "origin_not_allowed")
    answer = await http.post(
        "/v1/realtime/client_secrets",
        headers={"Authorization": f"Bearer {auth.ALPHA}", "Origin": "https://evil.example.com"},
        json={},
    )
    assert answer.status_code == 403
    assert (
        await http.get("/demo/session", headers={"Origin": "https://evil.example"})
    ).status_code == 403


async def test_client_secrets_refuses_bad_input_with_openais_400_and_no_key_with_401(
    http: httpx.AsyncClient,
) -> None:
    bearer = {"Authorization": f"Bearer {auth.ALPHA}"}
    for body, param in [
        ({"expires_after": {"anchor": "created_at", "seconds": 5}}, "expires_after.seconds"),
        ({"expires_after": {"anchor": "created_at", "seconds": 7201}}, "expires_after.seconds"),
        ({"expires_after": {"anchor": "expires_at", "seconds": 60}}, "expires_after.anchor"),
        ({"session": {"type": "transcription"}}, "session.type"),
    ]:
        answer = await http.post("/v1/realtime/client_secrets", headers=bearer, json=body)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert (error["type"], error["param"]) == ("invalid_request_error", param), error
    answer = await http.post("/v1/realtime/client_secrets", content=b"{nope", headers=bearer)
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "invalid_json")
    assert (await http.post("/v1/realtime/client_secrets", json={})).status_code == 401
    minted = (await http.post("/v1/realtime/client_secrets", headers=bearer, json={})).json()
    # A secret opens sessions; it cannot mint more secrets.
    answer = await http.post(
        "/v1/realtime/client_secrets",
        headers={"Authorization": f"Bearer {minted['value']}"},
        json={},
    )
    assert answer.status_code == 401


async def test_concurrent_sessions_per_key_hold_and_a_secret_counts_against_its_key(
    auth_stack: LocalStack,
) -> None:
    minted = await _mint(auth_stack, auth.GAMMA)
    by_key = await _socket(auth_stack, headers={"Authorization": f"Bearer {auth.GAMMA}"})
    by_secret = await _socket(auth_stack, protocols=auth.browser_protocols(minted.value))
    try:
        for c in (by_key, by_secret):
            await c.until(lambda e: e["type"] == "session.created")
        assert auth.MAX_SESSIONS_PER_KEY == 2
        for kwargs in (
            {"headers": {"Authorization": f"Bearer {auth.GAMMA}"}},
            {"protocols": auth.browser_protocols(minted.value)},
        ):
            status, body = await _refused(auth_stack, **kwargs)
            assert (status, body["error"]["code"]) == (429, "key_session_limit"), body
            assert body["error"]["type"] == "rate_limit_error"
        # Another key is not affected.
        other = await _socket(auth_stack, headers={"Authorization": f"Bearer {auth.SINGLE_KEY}"})
        await other.until(lambda e: e["type"] == "session.created")
        await other.close()
    finally:
        await by_secret.close()

    async def reopened() -> bool:
        try:
            client = await _socket(auth_stack, headers={"Authorization": f"Bearer {auth.GAMMA}"})
        except websockets.InvalidStatus as exc:
            assert exc.response.status_code == 429
            return False
        await client.until(lambda e: e["type"] == "session.created")
        await client.close()
        return True

    try:
        # A slot frees once the gateway has seen the closed socket out.
        await eventually(reopened)
    finally:
        await by_key.close()


async def test_opens_per_second_per_key_hold(auth_stack: LocalStack) -> None:
    """BETA's bucket starts full (OPENS_BURST) and refills about never."""
    headers = {"Authorization": f"Bearer {auth.BETA}"}
    for _ in range(auth.OPENS_BURST):
        client = await _socket(auth_stack, headers=headers)
        created = await client.until(lambda e: e["type"] in ("session.created", "error"))
        assert created["type"] == "session.created", created
        await client.close()
    status, body = await _refused(auth_stack, headers=headers)
    assert (status, body["error"]["code"]) == (429, "key_rate_limit"), body
    # A secret of the same key draws on the same bucket.
    minted = await _mint(auth_stack, auth.BETA)
    status, body = await _refused(auth_stack, protocols=auth.browser_protocols(minted.value))
    assert (status, body["error"]["code"]) == (429, "key_rate_limit"), body


async def test_the_demo_endpoint_gives_the_page_a_short_lived_secret(
    auth_stack: LocalStack, http: httpx.AsyncClient
) -> None:
    answer = await http.get("/demo/session", headers={"Origin": _origin(auth_stack)})
    assert answer.status_code == 200 and answer.headers["cache-control"] == "no-store"
    body = answer.json()
    assert body["value"].startswith("ek_")
    assert body["expires_at"] <= int(time.time()) + 60
    client = await _socket(auth_stack, protocols=auth.browser_protocols(body["value"]))
    try:
        created = await client.until(lambda e: e["type"] in ("session.created", "error"))
        assert created["type"] == "session.created", created
    finally:
        await client.close()


async def test_without_a_demo_key_there_is_no_demo_endpoint(synthetic_stack: LocalStack) -> None:
    async with httpx.AsyncClient(base_url=synthetic_stack.gateway_url) as http:
        assert (await http.get("/demo/session")).status_code == 404
