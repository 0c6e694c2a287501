"""Random MiniCPM-o 4.5 token2wav folders: a tiny one for tests (the
published file names, stepaudio.py's, modules and rates, at toy widths),
and one at the published widths for benchmarks (`write_published`).

What stays published: the code vocabulary (6561), 3 codes of lookahead, the
flow's up-rate 2 (25 codes a second to 50 mel frames), 80 mel bins, a
192-wide speaker embedding, the DiT's input (noise, encoder output, speaker
and prompt condition, 80 bins each) and HiFT's upsampling (8 x 5 x 3, then
an inverse STFT of hop 4: 480 samples a frame, 24 kHz). What shrinks: the
conformer (one block and one upsampled block, 32 wide, the published six
and four 512 wide), the DiT (two blocks 32 wide, two heads of 16; published
16 blocks 512 wide, eight heads of 64) and HiFT (16 channels where the
published has 512). A second of audio then decodes in a few tens of
milliseconds on one CPU thread, through the ten solver steps the published
model takes.

Weights are the modules' own initialisation plus seeded noise, so that the
DiT's zero-initialised output layers do not make every code sound alike.

The published widths (`PUBLISHED_FLOW`): the DiT's are the package's own
scratch sizes (16 blocks, 8 heads of 64, 512 wide: `CausalConditionalCFM`'s
and `DiT`'s cache buffers); the conformer's are CosyVoice2's published
encoder (6 and 4 blocks 512 wide, 8 heads, MLP 2,048); HiFT is the
package's default (512). Assumed, flow.yaml not being at hand: the DiT's
MLP ratio (the class's default, 4) and a 6 s speaker prompt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from antiphon.common.minicpmo import stepaudio

if TYPE_CHECKING:
    from pathlib import Path

    import torch

_SEED = 4503
_PROMPT_CODES = 25
_HIFT_WIDTH = 16
_PUBLISHED_PROMPT_CODES = 150
_PUBLISHED_HIFT_WIDTH = 512
_VOCABULARY = 6561
_SPEAKER_WIDTH = 192
_MEL_BINS = 80

TINY_FLOW = f"""\
# A tiny random MiniCPM-o 4.5 token2wav flow (antiphon.common.minicpmo.token2wav_assets).
flow: !new:cosyvoice2.flow.flow.CausalMaskedDiffWithXvec
  input_size: 32
  output_size: {_MEL_BINS}
  spk_embed_dim: {_SPEAKER_WIDTH}
  output_type: mel
  vocab_size: {_VOCABULARY}
  encoder: !new:cosyvoice2.transformer.upsample_encoder_v2.UpsampleConformerEncoderV2
    input_size: 32
    output_size: 32
    input_layer: linear
    pre_lookahead_len: 3
    num_blocks: 1
    num_up_blocks: 1
    up_stride: 2
    up_scale_factor: 2
    attention_heads: 2
    pos_enc_layer_type: rel_pos_espnet
    selfattention_layer_type: rel_selfattn
    key_bias: true
    linear_units: 64
    dropout_rate: 0.1
    positional_dropout_rate: 0.1
    attention_dropout_rate: 0.1
    normalize_before: true
  decoder: !new:cosyvoice2.flow.flow_matching.CausalConditionalCFM
    inference_cfg_rate: 0.7
    estimator: !new:cosyvoice2.flow.decoder_dit.DiT
      in_channels: {4 * _MEL_BINS}
      out_channels: {_MEL_BINS}
      mlp_ratio: 2.0
      depth: 2
      num_heads: 2
      head_dim: 16
      hidden_size: 32
"""


PUBLISHED_FLOW = (
    TINY_FLOW.replace("A tiny random", "A random")
    .replace("input_size: 32", "input_size: 512")
    .replace("output_size: 32", "output_size: 512")
    .replace("num_blocks: 1", "num_blocks: 6")
    .replace("num_up_blocks: 1", "num_up_blocks: 4")
    .replace("attention_heads: 2", "attention_heads: 8")
    .replace("linear_units: 64", "linear_units: 2048")
    .replace("mlp_ratio: 2.0", "mlp_ratio: 4.0")
    .replace("depth: 2", "depth: 16")
    .replace("num_heads: 2", "num_heads: 8")
    .replace("head_dim: 16", "head_dim: 64")
    .replace("hidden_size: 32", "hidden_size: 512")
)


def write_tiny(folder: Path) -> None:
    """Writes the tiny token2wav into `folder` (made if missing):
    flow.yaml, flow.pt, hift.pt and speaker.pt (a second of prompt)."""
    _write(folder, TINY_FLOW, hift_width=_HIFT_WIDTH, prompt_codes=_PROMPT_CODES)


def write_published(folder: Path) -> None:
    """`write_tiny` at the published widths (some 130 M random weights,
    0.5 GB), for benchmarks: what a call costs, not what it says."""
    _write(
        folder,
        PUBLISHED_FLOW,
        hift_width=_PUBLISHED_HIFT_WIDTH,
        prompt_codes=_PUBLISHED_PROMPT_CODES,
    )


def _write(folder: Path, flow_config: str, *, hift_width: int, prompt_codes: int) -> None:
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    seeded = torch.Generator().manual_seed(_SEED)
    # The modules initialise from torch's global generator.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_SEED)
        # The solver's scratch is never run here: the smallest that builds.
        flow = stepaudio.build_flow(flow_config, steps=1, frames=1)
        hift = stepaudio.new_hift(base_channels=hift_width, f0_channels=hift_width)
    for part in (flow, hift):
        _perturb(part, seeded)
    (folder / stepaudio.FLOW_CONFIG).write_text(flow_config)
    torch.save(flow.state_dict(), folder / stepaudio.FLOW_WEIGHTS)
    torch.save(hift.state_dict(), folder / stepaudio.HIFT_WEIGHTS)
    speaker = stepaudio.Speaker(
        tokens=torch.randint(0, _VOCABULARY, (prompt_codes,), generator=seeded),
        # About where a real log mel lies (silence near -11, loud speech near 2).
        mel=-5.0 + 2.0 * torch.randn(2 * prompt_codes, _MEL_BINS, generator=seeded),
        embedding=torch.randn(_SPEAKER_WIDTH, generator=seeded),
    )
    speaker.write(folder / stepaudio.SPEAKER)


def _perturb(part: torch.nn.Module, seeded: torch.Generator) -> None:
    import torch

    with torch.no_grad():
        for weight in part.parameters():
            # A matrix's noise at its fan-in's scale keeps activations near
            # unit size; vectors (biases, norms, weight norm's gains) stay near their own.
            fan_in = weight[0].numel() if weight.dim() > 1 else 1
            scale = fan_in**-0.5 if fan_in > 1 else 0.02
            weight.add_(scale * torch.randn(weight.shape, generator=seeded))
