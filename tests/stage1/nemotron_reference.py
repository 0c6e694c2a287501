"""What NeMo itself makes of one session, for the `nemotron` tests to compare
the batched rows with: the TTS part of NemotronVoiceChat.offline_inference
run on that session alone (batch 1, its own fresh prompt and cache), and
the codec's decode of the codes it makes, whole or streamed.

The model is built once per test session (`tiny_nemotron` in conftest.py):
the tiny random `random:tiny` checkpoint, greedy (noise 0, top-k 1, no
guidance), so that a session's codes are a function of its tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from nemo.collections.speechlm2.models.duplex_ear_tts import DuplexEARTTS

    from antiphon.common.nemotron.checkpoint import Checkpoint
    from antiphon.stage1.backends.nemotron.prompt import Prompt

Codes = npt.NDArray[np.int64]  # [frames, codebooks]
Samples = npt.NDArray[np.float32]

# Token ids a tiny session is made of, and how often: pads (0), the specials
# NeMo treats apart (BOS 1; EOS 2, after which it forces silence), words.
_PAD, _BOS, _EOS, _WORDS = 0.2, 0.08, 0.08, 0.64


@dataclass(frozen=True)
class TinyNemotron:
    checkpoint: Checkpoint
    tts: DuplexEARTTS
    # set_init_inputs' arguments for the checkpoint's speaker (prompt.speaker).
    speaker: dict[str, Any]
    prompt: Prompt

    @property
    def vocab(self) -> int:
        return len(self.tts.tokenizer.tokenizer)

    def tokens(self, seed: int, frames: int) -> list[int]:
        """A session's text tokens, one a frame."""
        rng = np.random.default_rng(seed)
        words = rng.integers(4, self.vocab, frames)
        kind = rng.choice(4, frames, p=[_PAD, _BOS, _EOS, _WORDS])
        return [int(w) if k == 3 else int(k) for k, w in zip(kind, words, strict=True)]

    def codes(self, tokens: list[int]) -> Codes:
        """NeMo's codes for a session of `tokens` alone, as offline_inference
        makes them: frame 0 is not stepped (its codes stay zero), frame t
        steps from frame t-1's codes and token (the prompt's at t = 1)."""
        import torch

        tts = self.tts
        with torch.no_grad():
            tts.set_init_inputs(**self.speaker)
            init = tts.get_init_inputs(B=1)
            generation = tts._get_generation_config(guidance_enabled=False)
            init.update({"use_cache": True, "past_key_values": None, "guidance_enabled": False})
            cache = tts.tts_model(**init).past_key_values
            code = init["code"][:, -1:]
            first = init["subword_ids"][:, -1].unsqueeze(-1)
            text = torch.tensor([tokens])
            out = torch.zeros(len(tokens), tts.tts_model.config.num_quantizers, dtype=torch.long)
            for t in range(1, len(tokens)):
                code, cache = tts.infer_codes_one_step(
                    current_subword_id=text[:, t : t + 1],
                    prev_subword_id=first if t == 1 else text[:, t - 1 : t],
                    current_subword_mask=torch.ones(1, 1, dtype=torch.bool),
                    prev_audio_tokens=code,
                    past_key_values=cache,
                    guidance_enabled=False,
                    generation_config=generation,
                    ignore_eos_flag_stop=True,
                )
                out[t] = code[0, 0]
        return out.numpy()  # type: ignore[no-any-return]

    def whole(self, codes: Codes) -> Samples:
        """NeMo's decode of a session's codes at once (offline_inference's audio)."""
        import torch

        with torch.no_grad():
            wav, _ = self.tts.audio_codec.decode(
                torch.from_numpy(codes)[None], torch.tensor([len(codes)])
            )
        return wav[0, 0].float().numpy()  # type: ignore[no-any-return]

    def streamed(self, codes: Codes) -> Samples:
        """NeMo's codec decoding a session's codes one frame a call, batch 1,
        through one fresh CausalConv1dCache."""
        import torch
        from nemo.collections.speechlm2.modules.ear_tts_vae_codec import CausalConv1dCache

        cache = CausalConv1dCache()
        with torch.no_grad():
            frames = [
                self.tts.audio_codec.decode(torch.from_numpy(codes[t : t + 1])[None], cache=cache)[
                    0
                ]
                for t in range(len(codes))
            ]
        return torch.cat(frames, -1)[0, 0].float().numpy()  # type: ignore[no-any-return]


def build() -> TinyNemotron:
    """The tiny random model, its speaker and prefilled prompt, as a worker loads them."""
    import torch

    from antiphon.common.nemotron import checkpoint as nemotron_checkpoint
    from antiphon.stage1.backends.nemotron import prompt

    torch.set_num_threads(1)  # as a worker runs it; two threads on two shared cores crawl
    checkpoint = nemotron_checkpoint.resolve("random:tiny")
    tts = checkpoint.tts("cpu")
    speaker = prompt.speaker(checkpoint, tts)
    return TinyNemotron(checkpoint, tts, speaker, prompt.prefill(tts, speaker))
