"""The function every tools test declares: the weather in a city, OpenAI's example."""

from __future__ import annotations

GET_WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
