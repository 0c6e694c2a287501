"""The speaker prompt every session's EAR-TTS starts from: which speaker the
checkpoint names, and the prompt's prefill, run once per worker.

NeMo starts a conversation's TTS by prefilling its backbone with a few
frames of the speaker's voice (NemotronVoiceChat.offline_inference:
`set_init_inputs`, `get_init_inputs`, one forward with a cache). The speaker
is the checkpoint's: `inference_speaker_name` (a latent stored with the
weights), else `inference_speaker_reference` (an audio file; relative to the
checkpoint folder unless absolute), else silence. Every session gets the
same prompt, so its keys and values are computed here once and kept for all
rows (kv_columns.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from nemo.collections.speechlm2.models.duplex_ear_tts import DuplexEARTTS

    from antiphon.common.nemotron.checkpoint import Checkpoint


@dataclass(frozen=True)
class Prompt:
    """The prefilled speaker prompt: where every session's TTS starts."""

    # Per backbone layer: [1, kv heads, P, head dim], P the prompt's frames.
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    # The audio codes and the text token a session's first step follows.
    code: torch.Tensor  # [1, 1, codebooks]
    token: int

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[2])


def speaker(checkpoint: Checkpoint, tts: DuplexEARTTS) -> dict[str, Any]:
    """`set_init_inputs`' speaker arguments for the checkpoint's speaker."""
    import torch

    model = checkpoint.config.get("model", {})
    name = model.get("inference_speaker_name")
    if name:
        return {"speaker_name": name}
    reference = model.get("inference_speaker_reference")
    if reference:
        from nemo.collections.audio.parts.utils.transforms import resample
        from nemo.collections.speechlm2.models.duplex_ear_tts import load_audio_librosa

        path = Path(reference)
        audio, rate = load_audio_librosa(
            str(path if path.is_absolute() else checkpoint.folder / path)
        )
        audio = resample(audio[:1], rate, tts.target_sample_rate)
    else:
        audio = torch.zeros(1, tts.target_samples_per_frame * 8)
    audio = audio.to(tts.device)
    return {
        "speaker_audio": audio,
        "speaker_audio_lens": torch.tensor([audio.shape[1]], device=tts.device),
    }


def prefill(tts: DuplexEARTTS, speaker_args: dict[str, Any]) -> Prompt:
    """NeMo's prompt prefill for one session (as offline_inference runs it)."""
    import torch

    with torch.inference_mode():
        tts.set_init_inputs(**speaker_args)
        init = tts.get_init_inputs(B=1)
        out = tts.tts_model(**init, use_cache=True, past_key_values=None, guidance_enabled=False)
        cache = out.past_key_values
        keys = [layer.keys.clone() for layer in cache.layers]
        values = [layer.values.clone() for layer in cache.layers]
        code = init["code"][:, -1:].clone()
        token = int(init["subword_ids"][0, -1])
    return Prompt(keys, values, code, token)
