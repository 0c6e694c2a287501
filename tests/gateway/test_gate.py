"""The gate refuses before any session: a foreign Origin (403), no key, a wrong
key, a forged or expired secret (401), a key past its limits (429)."""

from __future__ import annotations

import time

import pytest

from antiphon.gateway.edge.client_secrets import SecretSigner, signing_key
from antiphon.gateway.edge.credentials import KeyRing
from antiphon.gateway.edge.gate import Gate, Refusal
from antiphon.gateway.edge.key_limits import KeyLimits

SUB = "openai-insecure-api-key."


def _gate(*keys: str, origins: tuple[str, ...] = (), max_sessions: int = 0) -> Gate:
    return Gate(
        KeyRing.load("", "", *keys),
        SecretSigner(signing_key("test")),
        KeyLimits(max_sessions=max_sessions),
        origins,
    )


def _refusal(call: object, *args: object, **kwargs: object) -> Refusal:
    assert callable(call)
    with pytest.raises(Refusal) as refused:
        call(*args, **kwargs)
    return refused.value


def test_origins_on_the_list_pass_and_others_get_403() -> None:
    gate = _gate(origins=("https://app.example.com",))
    gate.check_origin({"origin": "https://app.example.com"})
    gate.check_origin({"origin": "HTTPS://APP.example.com/"})
    gate.check_origin({})  # not a browser
    refused = _refusal(gate.check_origin, {"origin": "https://evil.example.com"})
    assert (refused.status, refused.code, refused.reason) == (403, "origin_not_allowed", "origin")
    _gate().check_origin({"origin": "https://anything.example"})


def test_no_key_and_a_wrong_key_are_401_and_a_right_one_names_its_key() -> None:
    gate = _gate("sk-a", "sk-b")
    missing = _refusal(gate.authenticate, {}, secrets_allowed=True)
    assert (missing.status, missing.code) == (401, "missing_api_key")
    wrong = _refusal(gate.authenticate, {"authorization": "Bearer sk-c"}, secrets_allowed=True)
    assert (wrong.status, wrong.code, wrong.reason) == (
        401,
        "invalid_api_key",
        "invalid_credential",
    )
    assert "sk-c" not in wrong.message
    a = gate.authenticate({"authorization": "Bearer sk-a"}, secrets_allowed=True)
    b = gate.authenticate({}, ["realtime", SUB + "sk-b"], secrets_allowed=True)
    assert a.via == b.via == "api_key" and a.key_id != b.key_id


def test_a_secret_opens_as_its_minting_key_with_its_config_pinned() -> None:
    gate = _gate("sk-a")
    kid = gate.keys.match("sk-a")
    assert kid is not None
    value, _ = gate.signer.mint(kid, 60, {"instructions": "hi"})
    who = gate.authenticate({}, ["realtime", SUB + value], secrets_allowed=True)
    assert (who.key_id, who.via) == (kid, "client_secret")
    assert who.pinned is not None and who.pinned.names == ["instructions"]
    # A secret cannot mint secrets.
    refused = _refusal(
        gate.authenticate, {"authorization": f"Bearer {value}"}, secrets_allowed=False
    )
    assert refused.status == 401


def test_expired_forged_and_orphaned_secrets_are_401() -> None:
    gate = _gate("sk-a")
    kid = gate.keys.match("sk-a")
    assert kid is not None
    old, _ = gate.signer.mint(kid, 10, {}, now=time.time() - 11)
    expired = _refusal(gate.authenticate, {}, [SUB + old], secrets_allowed=True)
    assert (expired.code, expired.reason) == ("client_secret_expired", "expired_secret")
    foreign, _ = SecretSigner(signing_key("other")).mint(kid, 60, {})
    assert _refusal(gate.authenticate, {}, [SUB + foreign], secrets_allowed=True).code == (
        "invalid_api_key"
    )
    # Its key was removed: the secret goes with it.
    orphan, _ = gate.signer.mint("0123456789abcdef", 60, {})
    assert _refusal(gate.authenticate, {}, [SUB + orphan], secrets_allowed=True).status == 401


def test_with_auth_off_plain_credentials_are_ignored_but_secrets_still_judged() -> None:
    gate = _gate()
    assert gate.authenticate({"authorization": "Bearer sk-test"}, secrets_allowed=True).key_id == ""
    value, _ = gate.signer.mint("", 60, {"voice": "alloy"})
    assert gate.authenticate({}, [SUB + value], secrets_allowed=True).pinned is not None
    old, _ = gate.signer.mint("", 10, {}, now=time.time() - 11)
    assert _refusal(gate.authenticate, {}, [SUB + old], secrets_allowed=True).status == 401


def test_a_secrets_sessions_count_against_its_minting_key() -> None:
    gate = _gate("sk-a", max_sessions=1)
    kid = gate.keys.match("sk-a")
    assert kid is not None
    value, _ = gate.signer.mint(kid, 60, {})
    lease = gate.admit(gate.authenticate({"authorization": "Bearer sk-a"}, secrets_allowed=True))
    by_secret = gate.authenticate({}, [SUB + value], secrets_allowed=True)
    refused = _refusal(gate.admit, by_secret)
    assert (refused.status, refused.type, refused.code) == (
        429,
        "rate_limit_error",
        "key_session_limit",
    )
    lease.release()
    gate.admit(by_secret).release()


def test_refusals_are_openais_error_shape() -> None:
    refused = _refusal(_gate("sk-a").authenticate, {}, secrets_allowed=True)
    assert refused.body() == {
        "error": {
            "message": refused.message,
            "type": "invalid_request_error",
            "param": None,
            "code": "missing_api_key",
        }
    }
