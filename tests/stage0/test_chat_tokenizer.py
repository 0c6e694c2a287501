"""A prompt's ids, encoded piece by piece and cached, are exactly the ids of the
whole rendered prompt, for the default model's tokenizer; a new turn encodes
only the pieces it adds; a tokenizer whose pieces do not add up is encoded whole."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from antiphon.stage0.assets import Stage0Assets
from antiphon.stage0.backends.cascade.llm import history, tool_prompt
from antiphon.stage0.backends.cascade.llm.chat_tokenizer import ChatTokenizer
from antiphon.stage0.backends.cascade.llm.prompt import preamble_for, with_preamble
from antiphon.v1 import common_pb2 as cpb

Message = tuple[str, str]
WEATHER = cpb.Tool(
    name="get_weather",
    description="Get the current weather in a city.",
    parameters=json.dumps({"type": "object", "properties": {"city": {"type": "string"}}}),
)
TIME = cpb.Tool(name="get_time", description="Get the local time.")
CALL = (
    tool_prompt.CALL,
    json.dumps({"call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'}),
)
RESULT = (
    tool_prompt.RESULT,
    json.dumps({"call_id": "c1", "output": '{"temp_c": 21, "sky": "clear"}'}),
)


def turns(n: int) -> list[Message]:
    out: list[Message] = [("system", "You are the voice assistant of caller 7. Be friendly.")]
    for i in range(n):
        out.append(("user", f"Question {i}: how far is the moon, roughly, in km?"))
        out.append(("assistant", f"About 384,400 km, answer {i}. Light takes 1.3 s to cross it."))
    return [*out, ("user", "And the sun?")]


HISTORIES: dict[str, list[Message]] = {
    "one question": [("user", "What is the capital of France?")],
    "twenty turns": turns(20),
    "a call and its result": [*turns(2), ("user", "Weather in Paris?"), CALL, RESULT],
    "awkward text": [
        ("system", "  Leading and trailing spaces.  "),
        ("user", "Émoji 🙂, 中文, tabs\t, and\n\n\nnewlines; 3.14159 and 1,000,000"),
        ("assistant", ""),
        ("user", "I typed <|im_end|> and <tool_call> myself. ```code```"),
        ("assistant", " starts with a space and ends with one "),
        ("user", "\n"),
    ],
}


@pytest.fixture(scope="module")
def tokenizer(assets: Stage0Assets) -> PreTrainedTokenizerBase:
    """The default model's tokenizer, loaded apart from the one under test."""
    loaded: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(
        assets.llm_model, local_files_only=True
    )
    return loaded


def whole(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def prompts(chat: ChatTokenizer, messages: Sequence[Message]) -> list[str]:
    """The history as each pass of an answer renders it: without tools, with
    them (the template's own way), and with them told in the system message."""
    full = with_preamble(messages, preamble_for("Be brief.", "No lists.", False), "Answer it.")
    offered = [WEATHER, TIME]
    described = tool_prompt.described(
        tool_prompt.spoken_messages(full, calls_as_json=True), offered
    )
    return [
        tool_prompt.renderer(chat, ())(full),
        tool_prompt.renderer(chat, offered)(full),
        chat.render_chat(described),
    ]


@pytest.mark.models
def test_the_default_model_s_prompts_are_encoded_by_pieces(
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    """Otherwise the equality below would hold trivially (whole prompts)."""
    assert ChatTokenizer(tokenizer).by_pieces


@pytest.mark.models
@pytest.mark.parametrize("name", sorted(HISTORIES))
def test_the_ids_are_those_of_the_whole_rendered_prompt(
    tokenizer: PreTrainedTokenizerBase, name: str
) -> None:
    chat = ChatTokenizer(tokenizer)
    for text in prompts(chat, HISTORIES[name]):
        assert chat.encode(text) == whole(tokenizer, text)
        # Again, now from the cache.
        assert chat.encode(text) == whole(tokenizer, text)
        assert chat.count_tokens(text) == len(whole(tokenizer, text))


@pytest.mark.models
def test_a_cut_history_counts_and_encodes_as_the_whole_tokenizer_does(
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    """history.fit_prompt cuts the same turns, and the prompt it gives has the same ids."""
    chat = ChatTokenizer(tokenizer)
    messages = with_preamble(turns(40))
    for offered in ((), (WEATHER,)):
        render = tool_prompt.renderer(chat, offered)
        fitted = [
            history.fit_prompt(
                messages, render, count, max_model_len=512, reserve=64, retention_ratio=0.8
            )
            for count in (chat.count_tokens, lambda text: len(whole(tokenizer, text)))
        ]
        assert fitted[0] == fitted[1] and fitted[0] != render(messages)
        assert chat.encode(fitted[0]) == whole(tokenizer, fitted[0])


@pytest.mark.models
def test_a_new_turn_encodes_only_the_pieces_it_adds(tokenizer: PreTrainedTokenizerBase) -> None:
    chat = ChatTokenizer(tokenizer)
    render = tool_prompt.renderer(chat, ())
    messages = with_preamble(turns(10))
    chat.encode(render(messages))
    before = chat.encoded
    grown = [*messages, ("assistant", "About 150 million km."), ("user", "And Mars?")]
    assert chat.encode(render(grown)) == whole(tokenizer, render(grown))
    # The answer and the new question; the template's markup was seen before.
    assert chat.encoded - before == 2


@pytest.mark.models
@pytest.mark.parametrize("offered", [(), (WEATHER,)], ids=["spoken", "functions offered"])
def test_a_turn_made_ready_encodes_nothing_when_asked(
    tokenizer: PreTrainedTokenizerBase, offered: Sequence[cpb.Tool]
) -> None:
    """The answer and the new question, made ready as the worker produced them,
    leave nothing for the request path to encode, and the ids are unchanged."""
    chat = ChatTokenizer(tokenizer)
    render = tool_prompt.renderer(chat, offered)
    messages = with_preamble(turns(10), preamble_for("Be brief.", "", bool(offered)))
    chat.encode(render(messages))
    answer, question = ("assistant", "About 150 million km."), ("user", "And Mars?")
    chat.prepare(*answer)
    chat.prepare(*question)
    before = chat.encoded
    grown = render([*messages, answer, question])
    assert chat.encode(grown) == whole(tokenizer, grown)
    assert chat.encoded == before


def toy(scheme: str, lstrip: bool = False) -> PreTrainedTokenizerFast:
    """A tiny BPE with a Metaspace pre-tokenizer and ChatML's two tokens."""
    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme=scheme)
    tk.decoder = decoders.Metaspace(prepend_scheme=scheme)
    trainer = trainers.BpeTrainer(
        vocab_size=200,
        show_progress=False,
        special_tokens=["<unk>", AddedToken("<|im_start|>", lstrip=lstrip), "<|im_end|>"],
    )
    tk.train_from_iterator(["system user assistant be brief hello world there x 42"] * 8, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk)


TOY_PROMPT = "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\nx"


def test_a_tokenizer_that_prefixes_only_the_text_s_start_is_encoded_whole() -> None:
    """Metaspace's "first" scheme gives each piece alone a prefix space it lacks in the whole."""
    first = toy("first")
    assert (
        first.encode("x", add_special_tokens=False)
        != first.encode("<|im_end|>x", add_special_tokens=False)[1:]
    )
    chat = ChatTokenizer(first)
    assert not chat.by_pieces
    assert chat.encode(TOY_PROMPT) == whole(first, TOY_PROMPT)


def test_a_tokenizer_whose_pieces_add_up_is_encoded_by_pieces() -> None:
    always = toy("always")
    chat = ChatTokenizer(always)
    assert chat.by_pieces and chat.encode(TOY_PROMPT) == whole(always, TOY_PROMPT)


def test_an_added_token_that_strips_whitespace_turns_pieces_off() -> None:
    chat = ChatTokenizer(toy("always", lstrip=True))
    assert not chat.by_pieces


def test_whole_prompts_are_cached_too() -> None:
    """Encoded whole, the fit's count and the engine's ids still share one encode."""
    chat = ChatTokenizer(toy("first"))
    chat.count_tokens(TOY_PROMPT)
    chat.encode(TOY_PROMPT)
    assert chat.encoded == 1
