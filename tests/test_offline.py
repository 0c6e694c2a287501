"""The fast tier's network guard (tests/support/offline.py): off-machine refused, loopback kept."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

import pytest

from tests.support.offline import NetworkBlocked, Offline, is_local

# TEST-NET-1 (RFC 5737): documentation only, never routed.
FAR = "192.0.2.1"


@pytest.fixture
def offline() -> Iterator[Offline]:
    guard = Offline()
    guard.install()
    try:
        yield guard
    finally:
        guard.uninstall()


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1", "0.0.0.0", "localhost", None]
)
def test_loopback_and_this_machine_are_local(host: str | None) -> None:
    assert is_local(host)
    assert is_local(socket.gethostname())


@pytest.mark.parametrize(
    "host", [FAR, "10.0.0.1", "2001:db8::1", "pypi.org", b"registry.npmjs.org"]
)
def test_other_addresses_and_any_other_name_are_not(host: str | bytes) -> None:
    assert not is_local(host)


def test_a_connection_past_this_machine_is_refused_and_recorded(offline: Offline) -> None:
    with socket.socket() as sock, pytest.raises(NetworkBlocked, match=re.escape(FAR)):
        sock.connect((FAR, 9))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, pytest.raises(NetworkBlocked):
        udp.sendto(b"x", (FAR, 9))
    with pytest.raises(NetworkBlocked, match=re.escape("pypi.org")):
        socket.getaddrinfo("pypi.org", 443)
    assert len(offline.attempts) == 3


def test_loopback_and_unix_sockets_still_work(offline: Offline) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        with socket.create_connection(server.getsockname(), timeout=5) as client:
            peer, _ = server.accept()
            with peer:
                client.sendall(b"ping")
                assert peer.recv(4) == b"ping"
    left, right = socket.socketpair(socket.AF_UNIX)
    with left, right:
        left.sendall(b"x")
        assert right.recv(1) == b"x"
    assert offline.attempts == []


def test_a_swallowed_refusal_still_fails_the_test(offline: Offline) -> None:
    try:
        socket.create_connection((FAR, 443), timeout=1)
    except OSError:
        pass  # what a retrying client library might do
    with pytest.raises(pytest.fail.Exception, match=re.escape(FAR)):
        offline.check("the test")
    offline.check("the test")  # reported once, then clear


def test_uninstall_puts_the_socket_functions_back() -> None:
    before = (socket.socket.connect, socket.getaddrinfo)
    guard = Offline()
    guard.install()
    assert socket.socket.connect is not before[0]
    guard.uninstall()
    assert (socket.socket.connect, socket.getaddrinfo) == before
