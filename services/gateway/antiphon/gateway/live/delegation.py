"""GPT-Live's `delegation`: who answers what the voice model hands off.

`null` (or absent) and `{type: "client"}` hand it to the application;
`{type: "responses", responses: {...}}` to a Responses model, here the
deployment's own stage0 LLM (the cascade's), which the session service
reaches for a `response.create` (docs/gpt-live.md). Decisions are not
served. Strict as the start is: unknown keys are `unknown_parameter`.

Of the Responses settings, `model` is echoed (the deployment's delegate
answers whatever it is called), `instructions`, `tools`, `tool_choice` and
`max_output_tokens` go with each delegated response, and `reasoning`,
`text`, `service_tier` and `parallel_tool_calls` are checked for their type,
echoed and not used (one local model, no tiers, no reasoning summaries).

The configuration is fixed at the start except this: a `session.update`
may change the delegation's settings, not its type; omitted settings keep
their values.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate import fields
from antiphon.gateway.translate.tools import tool_choice, tools
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb

Json = dict[str, Any]

CLIENT = "client"
RESPONSES = "responses"
_DELEGATION_KEYS = {
    CLIENT: frozenset({"type", "acknowledgement_delay_ms"}),
    RESPONSES: frozenset({"type", "responses", "acknowledgement_delay_ms"}),
}
_RESPONSES_KEYS = frozenset(
    {
        "model",
        "instructions",
        "tools",
        "tool_choice",
        "max_output_tokens",
        "parallel_tool_calls",
        "reasoning",
        "text",
        "service_tier",
    }
)


@dataclass(frozen=True)
class Delegation:
    type: str = CLIENT
    acknowledgement_delay_ms: int | None = None
    # The Responses settings as the client wrote them (checked), for the echo.
    responses: Json = field(default_factory=dict)

    @property
    def served_by_responses(self) -> bool:
        return self.type == RESPONSES

    def resource(self) -> Json:
        """As the session resource shows it."""
        out: Json = {"type": self.type}
        if self.acknowledgement_delay_ms is not None:
            out["acknowledgement_delay_ms"] = self.acknowledgement_delay_ms
        if self.served_by_responses:
            out["responses"] = dict(self.responses)
        return out

    def response(self) -> spb.CreateResponse:
        """A delegated `response.create`: the backend model's settings with it."""
        r = self.responses
        out = spb.CreateResponse(delegated=True, output_modalities=["text"])
        if r.get("instructions") is not None:
            out.instructions = r["instructions"]
        if r.get("max_output_tokens") is not None:
            out.max_output_tokens = r["max_output_tokens"]
        if r.get("tools") is not None:
            out.tools.extend(tools(r["tools"], "tools"))
            out.has_tools = True
        if r.get("tool_choice") is not None:
            out.tool_choice.CopyFrom(tool_choice(r["tool_choice"], "tool_choice"))
        return out


def at_start(value: Any, param: str = "session.delegation") -> Delegation | None:
    """`session.delegation` of a start (None: null, the application's)."""
    if value is None:
        return None
    return _read(fields.obj(value, param), param, None)


def updated(
    current: Delegation | None, value: Any, param: str = "session.delegation"
) -> Delegation | None:
    """`session.update`'s `delegation`: same type, omitted settings kept."""
    if value is None:
        return current
    return _read(fields.obj(value, param), param, current or Delegation())


def _read(d: Json, param: str, current: Delegation | None) -> Delegation:
    kind = fields.string(fields.required(d, "type", f"{param}.type"), f"{param}.type")
    if kind == "decisions":
        raise ClientError(
            "unsupported_capability", "Decisions delegation is not served", param=f"{param}.type"
        )
    if kind not in _DELEGATION_KEYS:
        raise ClientError(
            "invalid_value",
            f"Invalid value: {kind!r}. Supported values are: 'client', 'responses'.",
            param=f"{param}.type",
        )
    if current is not None and kind != current.type:
        raise ClientError(
            "invalid_value",
            f"the delegation type is fixed at the start ({current.type!r}), not {kind!r}",
            param=f"{param}.type",
        )
    fields.known_keys(d, _DELEGATION_KEYS[kind], f"{param}.")
    delay = d.get("acknowledgement_delay_ms")
    if delay is not None:
        delay = fields.non_negative_int(
            delay, f"{param}.acknowledgement_delay_ms", fields.INT32_MAX
        )
    base = current or Delegation(type=kind)
    if delay is not None:
        base = replace(base, acknowledgement_delay_ms=delay)
    if kind == CLIENT:
        return base
    given = d.get("responses")
    if current is None:
        given = fields.obj(fields.required(d, "responses", f"{param}.responses"), param)
    elif given is None:
        return base
    settings = _responses(fields.obj(given, f"{param}.responses"), f"{param}.responses", current)
    return replace(base, responses=settings)


def _responses(r: Json, param: str, current: Delegation | None) -> Json:
    fields.known_keys(r, _RESPONSES_KEYS, f"{param}.")
    merged = dict(current.responses) if current else {}
    merged.update({k: v for k, v in r.items() if v is not None})
    if current is None or "model" in r:
        model = fields.required(merged, "model", f"{param}.model")
        fields.non_empty_string(model, f"{param}.model")
    if merged.get("instructions") is not None:
        fields.string(merged["instructions"], f"{param}.instructions")
    if merged.get("tools") is not None:
        _served_tools(merged["tools"], f"{param}.tools")
    if merged.get("tool_choice") is not None:
        _served_choice(merged["tool_choice"], f"{param}.tool_choice")
    if merged.get("max_output_tokens") is not None:
        fields.positive_int(merged["max_output_tokens"], f"{param}.max_output_tokens")
    if merged.get("parallel_tool_calls") is not None:
        fields.boolean(merged["parallel_tool_calls"], f"{param}.parallel_tool_calls")
    for key in ("reasoning", "text"):
        if merged.get(key) is not None:
            fields.obj(merged[key], f"{param}.{key}")
    if merged.get("service_tier") is not None:
        fields.string(merged["service_tier"], f"{param}.service_tier")
    return merged


def _served_tools(value: Any, param: str) -> list[cpb.Tool]:
    """Function tools; the hosted ones (web search, MCP, ...) are not served."""
    for i, t in enumerate(value if isinstance(value, list) else []):
        kind = t.get("type") if isinstance(t, dict) else None
        if kind not in (None, "function"):
            raise ClientError(
                "unsupported_capability",
                f"{kind!r} tools are not served here: only function tools are",
                param=f"{param}[{i}].type",
            )
    return tools(value, param)


def _served_choice(value: Any, param: str) -> cpb.ToolChoice:
    """A function tool choice (or a mode); hosted tools' choices are not served."""
    if isinstance(value, dict) and value.get("type") not in (None, "function"):
        raise ClientError(
            "unsupported_capability",
            f"tool choice {value.get('type')!r}: only function tools are served",
            param=f"{param}.type",
        )
    return tool_choice(value, param)
