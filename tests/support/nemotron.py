"""A tiny Nemotron VoiceChat checkpoint folder that calls tools, for tests.

`random:tiny` has no function head (NeMo 3.0.0's reference has none, and the
tests that pin our stepping to it need none). This folder is the same tiny
model written as a published checkpoint (config.json, model.safetensors, the
LLM's folder) with `use_function_head`, and a function head that echoes its
channel: its weights are the text embedding's, scaled, so the head's greedy
token is the token that went into the channel the step before. Forcing a
call's tokens into the channel (the model's own input) then makes the model
say that call itself, a step later, through its own head: a random model
calls a tool only so. It never talks.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from antiphon.common.nemotron import checkpoint, tiny

ECHO_SCALE = 8.0
# The channel outweighs the audio (the tiny embeddings are ~30x smaller than
# its perception output), so that the head reads its channel back.
FUNCTION_WEIGHT = 100.0


def tools_checkpoint(folder: Path) -> Path:
    tiny.write(folder)
    config = tiny.config()
    stt_config = config["model"]["stt"]["model"]
    stt_config["use_function_head"] = True
    stt_config["duplex_function_channel_weight"] = FUNCTION_WEIGHT
    # The channel drowns what the model hears, so its text would be one word
    # for ever: it says nothing instead (a response of calls alone).
    stt_config["inference_pad_boost"] = 1000.0
    (folder / checkpoint.CONFIG_FILE).write_text(json.dumps(config, indent=1))
    unweighted = checkpoint.Checkpoint(str(folder), folder, config, None)
    stt, tts = unweighted.stt(), unweighted.tts()
    with torch.no_grad():
        stt.function_head.weight.copy_(stt.embed_tokens.weight * ECHO_SCALE)
    tensors: dict[str, torch.Tensor] = {}
    for prefix, model in ((checkpoint.STT_PREFIX, stt), (checkpoint.TTS_PREFIX, tts)):
        named = dict(model.named_parameters()) | dict(model.named_buffers())
        tensors |= {prefix + name: t.detach().clone().contiguous() for name, t in named.items()}
    save_file(tensors, str(folder / checkpoint.WEIGHTS_FILE))
    return folder
