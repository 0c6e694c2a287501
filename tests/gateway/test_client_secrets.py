"""Client secrets: signed, stateless, expiring; OpenAI's request read and bounded."""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

import pytest

from antiphon.gateway.edge.client_secrets import (
    DEFAULT_TTL_S,
    MAX_SECRET_CHARS,
    ClientSecretError,
    SecretExpired,
    SecretInvalid,
    SecretSigner,
    parse_request,
    response,
    signing_key,
)

SESSION = {"type": "realtime", "instructions": "Be brief.", "audio": {"output": {"voice": "alloy"}}}
# RFC 7230 tchar: what a WebSocket subprotocol may hold.
TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def test_a_minted_secret_verifies_with_its_key_id_expiry_and_session() -> None:
    signer = SecretSigner(signing_key("k"))
    value, expires_at = signer.mint("kid1", 600, SESSION, now=1000)
    assert value.startswith("ek_") and TOKEN.fullmatch(value)
    assert expires_at == 1600
    secret = signer.verify(value, now=1599)
    assert (secret.key_id, secret.expires_at, secret.session) == ("kid1", 1600, SESSION)


def test_two_secrets_minted_alike_differ() -> None:
    signer = SecretSigner(signing_key("k"))
    assert signer.mint("kid", 60, {}, now=5)[0] != signer.mint("kid", 60, {}, now=5)[0]


def test_a_secret_is_refused_from_its_expiry_on() -> None:
    signer = SecretSigner(signing_key("k"))
    value, expires_at = signer.mint("kid", 10, {}, now=1000)
    with pytest.raises(SecretExpired):
        signer.verify(value, now=expires_at)


def test_any_replica_with_the_same_signing_key_accepts_it_and_no_other_does() -> None:
    value, _ = SecretSigner(signing_key("shared")).mint("kid", 60, {})
    assert SecretSigner(signing_key("shared")).verify(value).key_id == "kid"
    with pytest.raises(SecretInvalid):
        SecretSigner(signing_key("other")).verify(value)
    # Unset: each process draws its own key.
    with pytest.raises(SecretInvalid):
        SecretSigner(signing_key("")).verify(value)
    assert signing_key("") != signing_key("")


def _flip(text: str, at: int) -> str:
    return text[:at] + ("A" if text[at] != "A" else "B") + text[at + 1 :]


def test_an_altered_or_made_up_secret_is_refused() -> None:
    signer = SecretSigner(signing_key("k"))
    value, _ = signer.mint("kid", 60, SESSION)
    body, mac = value[3:].rsplit(".", 1)
    forged_body = base64.urlsafe_b64encode(b"not zlib").rstrip(b"=").decode()
    for bad in [
        _flip(value, 5),  # the body
        _flip(value, len(value) - 2),  # the MAC
        f"ek_{forged_body}.{mac}",
        f"ek_{body}",
        "ek_",
        "sk-not-a-secret",
        value + "x",
    ]:
        with pytest.raises(SecretInvalid):
            signer.verify(bad)


def test_a_session_too_large_for_a_header_is_refused_at_minting() -> None:
    signer = SecretSigner(signing_key("k"))
    # Random text does not compress: it stays too long for a subprotocol.
    noise = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(200))
    big = {"instructions": noise}
    with pytest.raises(ClientSecretError) as refused:
        signer.mint("kid", 60, big)
    assert refused.value.param == "session"
    assert str(MAX_SECRET_CHARS) in refused.value.message


def test_the_request_defaults_to_ten_minutes_and_an_empty_session() -> None:
    assert parse_request(None).ttl_s == DEFAULT_TTL_S
    req = parse_request({"expires_after": {"anchor": "created_at", "seconds": 10}})
    assert (req.ttl_s, req.session) == (10, {})
    assert (
        parse_request({"expires_after": {"seconds": 7200}, "session": SESSION}).session == SESSION
    )


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ([], "invalid_type", ""),
        ({"expires_after": 5}, "invalid_type", "expires_after"),
        ({"expires_after": {"anchor": "now"}}, "invalid_value", "expires_after.anchor"),
        ({"expires_after": {"seconds": 9}}, "integer_out_of_range", "expires_after.seconds"),
        ({"expires_after": {"seconds": 7201}}, "integer_out_of_range", "expires_after.seconds"),
        ({"expires_after": {"seconds": "60"}}, "invalid_type", "expires_after.seconds"),
        ({"expires_after": {"seconds": True}}, "invalid_type", "expires_after.seconds"),
        ({"session": "x"}, "invalid_type", "session"),
        (
            {"session": {"type": "transcription"}},
            "unsupported_session_type",
            "session.type",
        ),
        ({"session": {"instructions": 5}}, "invalid_value", "session.instructions"),
    ],
)
def test_bad_requests_are_refused_naming_the_param(body: Any, code: str, param: str) -> None:
    with pytest.raises(ClientSecretError) as refused:
        parse_request(body)
    assert (refused.value.code, refused.value.param) == (code, param), refused.value


def test_the_response_is_openais_shape() -> None:
    body = response("ek_x", 123, {"instructions": "hi"})
    session = body["session"]
    assert session.pop("id").startswith("sess_")
    assert body == {
        "value": "ek_x",
        "expires_at": 123,
        "session": {"instructions": "hi", "type": "realtime", "object": "realtime.session"},
    }
