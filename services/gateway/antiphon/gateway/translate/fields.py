"""Validators of a client event's fields: each returns the value typed, or
raises one ClientError naming the field (`param`), so a refused event yields
no command and changes nothing.

The builders of commands (`translator`, `session_patch`, `items`,
`audio_formats`) read every field through these, so a field of one type is
refused with the same code and message wherever it appears.
"""

from __future__ import annotations

from typing import Any, TypeVar

from antiphon.gateway.errors import ClientError

# A client event as parsed JSON.
Event = dict[str, Any]

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

T = TypeVar("T")


def _invalid(param: str, must: str) -> ClientError:
    """The refusal of field `param`, which must `must` (one wording for every field)."""
    return ClientError("invalid_value", f"`{param}` must {must}", param=param)


def _typed(value: Any, kind: type[T], what: str, param: str) -> T:
    if not isinstance(value, kind):
        raise _invalid(param, f"be {what}")
    return value


def known_keys(obj: Event, allowed: frozenset[str], where: str = "") -> None:
    """Refuse the first key of `obj` outside `allowed`, as OpenAI's strict
    schemas do (GPT-Live's): `where` prefixes the key in `param`."""
    for key in obj:
        if key not in allowed:
            raise ClientError(
                "unknown_parameter", f"Unknown parameter: '{where}{key}'.", param=f"{where}{key}"
            )


def only(event: Event, allowed: frozenset[str]) -> None:
    """Refuse a type outside `allowed` as OpenAI refuses an unknown type."""
    t = event.get("type")
    if isinstance(t, str) and t in allowed:
        return
    supported = ", ".join(f"'{a}'" for a in sorted(allowed))
    raise ClientError(
        "invalid_value",
        f"Invalid value: {t!r}. Supported values are: {supported}.",
        param="type",
    )


def required(event: Event, key: str, param: str | None = None) -> Any:
    """`event[key]`; absent and null are the same missing parameter."""
    value = event.get(key)
    if value is None:
        name = param or key
        raise ClientError(
            "missing_required_parameter", f"missing required parameter `{name}`", param=name
        )
    return value


def obj(value: Any, param: str) -> Event:
    """An object; absent (None) reads as an empty one."""
    return {} if value is None else _typed(value, dict, "an object", param)


def string(value: Any, param: str) -> str:
    return _typed(value, str, "a string", param)


def non_empty_string(value: Any, param: str) -> str:
    text = string(value, param)
    if not text:
        raise _invalid(param, "not be empty")
    return text


def one_of(value: Any, allowed: tuple[str, ...], param: str) -> str:
    text = string(value, param)
    if text not in allowed:
        raise _invalid(param, f"be one of {allowed}")
    return text


def boolean(value: Any, param: str) -> bool:
    return _typed(value, bool, "a boolean", param)


def number(value: Any, param: str) -> float:
    # JSON's true is not 1 here: a bool is refused, though Python calls it an int.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _invalid(param, "be a number")
    return float(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(value: Any, param: str) -> int:
    # Bounded: a number past the proto field's range would not be refused, it would crash.
    if not _is_int(value) or not 1 <= value <= INT32_MAX:
        raise _invalid(param, "be a positive integer")
    return int(value)


def non_negative_int(value: Any, param: str, maximum: int = INT64_MAX) -> int:
    if not _is_int(value) or not 0 <= value <= maximum:
        raise _invalid(param, "be a non-negative integer")
    return int(value)


def max_tokens(value: Any, param: str) -> int:
    """A positive limit, or 0 for "inf" (the server's ceiling)."""
    if value == "inf":
        return 0
    if not _is_int(value) or not 1 <= value <= INT32_MAX:
        raise _invalid(param, "be a positive integer or 'inf'")
    return int(value)


def string_list(value: Any, param: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        raise _invalid(param, "be a list of strings")
    return list(value)


def client_event_id(event: Event | None) -> str:
    """The client's `event_id`, echoed in what answers it ("" when none or unusable)."""
    eid = (event or {}).get("event_id")
    if not isinstance(eid, str):
        return ""
    try:
        eid.encode()
    except UnicodeEncodeError:  # a lone surrogate (JSON may escape one) fits no protobuf string
        return ""
    return eid
