"""The fast tier runs with the network off: a test that reaches past this machine fails.

`make test-fast` (`pytest --fast`) must pass on a machine with no network
(`unshare -n` shows it for one run); this guard keeps that true in every
fast run, without root. While it is installed, a Python socket that connects
or sends to an address other than loopback (or the unspecified address,
which is this machine), and a name lookup of anything but `localhost` or this
machine's own name, raise `NetworkBlocked`; since library code may swallow
that error, the attempt is also recorded, and the test it happened in fails
after its setup, call or teardown.

What it cannot see: subprocesses (helm's npm install was one; `make
deploy-tools` does it now, and the helm tests are marked `npm`) and gRPC's C
core (whose channels in these tests all go to loopback). `unshare -n` sees
both.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Callable, Generator
from typing import Any

import pytest

_INET = (socket.AF_INET, socket.AF_INET6)


class NetworkBlocked(OSError):
    """A connection or lookup that would leave this machine, refused."""

    def __init__(self, what: str) -> None:
        super().__init__(
            errno.ENETUNREACH,
            f"{what}: `pytest --fast` runs with the network off (tests/support/offline.py); "
            "keep the test on loopback, or mark it so the fast tier leaves it out",
        )


def is_local(host: object) -> bool:
    """Whether `host` (an address or a name) is this machine without asking the network."""
    if host is None:
        return True  # getaddrinfo(None, ...): the wildcard or loopback address
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if not isinstance(host, str):
        return False
    if host in ("", "localhost", socket.gethostname()) or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False  # a name other than ours: resolving it asks DNS
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified


class Offline:
    """A pytest plugin: the guard, installed for the whole run by `install`."""

    def __init__(self) -> None:
        self.attempts: list[str] = []
        self._saved: list[tuple[object, str, Any]] = []

    def install(self) -> None:
        def refused(what: str) -> NetworkBlocked:
            self.attempts.append(what)
            return NetworkBlocked(what)

        def on_socket(name: str, address_arg: int) -> Callable[..., Any]:
            original = getattr(socket.socket, name)

            def guarded(sock: socket.socket, *args: Any) -> Any:
                address = args[address_arg] if len(args) > address_arg else None
                if sock.family in _INET and isinstance(address, tuple):
                    if not is_local(address[0]):
                        raise refused(f"socket.{name} to {address[0]}:{address[1]}")
                return original(sock, *args)

            return guarded

        def on_lookup(name: str) -> Callable[..., Any]:
            original = getattr(socket, name)

            def guarded(host: object, *args: Any, **kwargs: Any) -> Any:
                if not is_local(host):
                    raise refused(f"socket.{name}({host!r})")
                return original(host, *args, **kwargs)

            return guarded

        # sendto(data, address) or sendto(data, flags, address): the address is last.
        patches: list[tuple[object, str, Any]] = [
            (socket.socket, "connect", on_socket("connect", 0)),
            (socket.socket, "connect_ex", on_socket("connect_ex", 0)),
            (socket.socket, "sendto", on_socket("sendto", -1)),
            (socket, "getaddrinfo", on_lookup("getaddrinfo")),
            (socket, "gethostbyname", on_lookup("gethostbyname")),
            (socket, "gethostbyname_ex", on_lookup("gethostbyname_ex")),
        ]
        for owner, name, guarded in patches:
            self._saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, guarded)

    def uninstall(self) -> None:
        while self._saved:
            owner, name, original = self._saved.pop()
            setattr(owner, name, original)

    def check(self, when: str) -> None:
        """Fail the running test if anything tried to leave this machine since the last check."""
        attempts, self.attempts = self.attempts, []
        if attempts:
            pytest.fail(
                f"reached past this machine during {when} with the network off: "
                + "; ".join(attempts),
                pytrace=False,
            )

    def _phase(self, when: str) -> Generator[None, object, object]:
        # Each phase answers for its own attempts: one that raised has failed
        # already, and what it left is not the next phase's.
        self.attempts.clear()
        result = yield
        self.check(when)
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, object, object]:
        return (yield from self._phase("setup"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        return (yield from self._phase("the test"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, object, object]:
        return (yield from self._phase("teardown"))
