"""API keys are held as hashes, read from a file of one key a line, and found
wherever OpenAI's clients put them (Bearer header, browser subprotocol)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from antiphon.gateway.edge.credentials import KeyFileError, KeyRing, key_hash, key_id, presented


def test_a_key_matches_by_its_hash_and_nothing_else_does(tmp_path: Path) -> None:
    ring = KeyRing.load("sk-one")
    assert ring.match("sk-one") == key_id(key_hash("sk-one"))
    assert ring.match("sk-one ") is None
    assert ring.match("sk-on") is None
    assert ring.match("") is None


def test_the_ring_keeps_no_plaintext() -> None:
    ring = KeyRing.load("sk-secret-value", "", "sk-other")
    assert "sk-secret-value" not in repr(vars(ring))
    assert b"sk-secret-value" not in b"".join(ring._digests)


def test_the_keys_file_has_one_key_a_line_comments_and_hashed_keys(tmp_path: Path) -> None:
    hashed = hashlib.sha256(b"sk-hashed").hexdigest()
    path = tmp_path / "keys"
    path.write_text(f"# team keys\n\nsk-alpha\n  sk-beta  \nsha256:{hashed.upper()}\n")
    ring = KeyRing.load("sk-single", str(path))
    assert len(ring) == 4
    for key in ("sk-single", "sk-alpha", "sk-beta", "sk-hashed"):
        assert ring.match(key) is not None, key
    assert ring.match("# team keys") is None
    assert ring.match(f"sha256:{hashed}") is None


@pytest.mark.parametrize("line", ["sha256:abc", "two words"])
def test_a_keys_file_line_that_is_no_key_fails_the_load(tmp_path: Path, line: str) -> None:
    path = tmp_path / "keys"
    path.write_text(f"sk-ok\n{line}\n")
    with pytest.raises(KeyFileError, match=":2:"):
        KeyRing.load("", str(path))


def test_no_key_configured_is_an_empty_ring() -> None:
    assert not KeyRing.load("", "")
    assert KeyRing.load("", "").match("anything") is None


def test_key_ids_name_keys_and_survive_as_long_as_the_key() -> None:
    ring = KeyRing.load("sk-one")
    kid = ring.match("sk-one")
    assert kid is not None and ring.has_id(kid)
    assert not KeyRing.load("sk-two").has_id(kid)


def test_the_credential_comes_from_bearer_then_the_browser_subprotocol() -> None:
    assert presented({"authorization": "Bearer sk-a"}) == "sk-a"
    assert presented({"authorization": "bearer  sk-a "}) == "sk-a"
    assert presented({}, ["realtime", "openai-insecure-api-key.ek_x.y"]) == "ek_x.y"
    assert presented({"authorization": "Bearer sk-a"}, ["openai-insecure-api-key.b"]) == "sk-a"
    assert presented({"authorization": "Basic abc"}) is None
    assert presented({}, ["realtime", "openai-insecure-api-key."]) is None
    assert presented({}) is None
