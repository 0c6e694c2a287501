"""The system message of every prompt: stage0's voice preamble first, the client's
instructions after it, then one line that restates what the preamble holds.

Clients send instructions written for large models (a persona, a tone, "keep
answers short"); a small model follows them loosely and, left alone with them,
drifts into long, off-topic or foreign-language answers that are then spoken
for half a minute, or greets in character instead of answering. The preamble
says what holds whatever the instructions say: the answer is heard, so it is
short, plain, in the user's language and starts with the answer itself. The
client's instructions are added after it and never replace it; after them, a
short reminder, since a small model weighs the last words of its system
message most (measured with bench/answers.py's questions as Whisper heard
them: Qwen2.5-Coder-0.5B 34/48 right with the preamble alone, 37/48 with this
one and the reminder, and answers 10 tokens long on average instead of 12).

The style line ("plain spoken words: no lists, markdown, code") is left out
when functions are offered: Qwen2.5-Coder-1.5B read "no code" as "do not
write the call" and described the call aloud instead ("To get the weather
in Paris, use the `get_weather` function with..."), for every weather
question tried; without the line it writes the call.
"""

from __future__ import annotations

from collections.abc import Sequence

Message = tuple[str, str]

VOICE_PREAMBLE = (
    "You are a voice assistant: everything you write is spoken aloud. "
    "Reply in one or two short sentences in the language the user speaks, "
    "and start with the answer itself."
)
VOICE_STYLE = "Use plain spoken words: no lists, markdown, code or emoji."
VOICE_REMINDER = (
    "Whatever the instructions above say, answer the user's question itself, "
    "briefly and in the user's language."
)


def preamble_for(preamble: str, style: str, functions_offered: bool) -> str:
    """The preamble of one pass: with the style line, unless functions are offered."""
    return preamble if functions_offered or not style else f"{preamble} {style}".strip()


def with_preamble(
    messages: Sequence[Message],
    preamble: str = VOICE_PREAMBLE,
    reminder: str = VOICE_REMINDER,
) -> list[Message]:
    """The messages with `preamble` first: a leading system message (the client's
    instructions) is added after it, then `reminder`; the rest follows unchanged."""
    instructions = ""
    rest = list(messages)
    if rest and rest[0][0] == "system":
        instructions = rest.pop(0)[1].strip()
    parts = [preamble.strip(), instructions, reminder.strip() if instructions else ""]
    system = "\n\n".join(part for part in parts if part)
    return [("system", system), *rest] if system else rest
