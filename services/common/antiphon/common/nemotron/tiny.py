"""`random:tiny`: a Nemotron VoiceChat small enough for a CPU test, written as
a checkpoint folder (checkpoint.py reads it like a published one).

Every part keeps its real kind at toy size: a NemotronH LLM with one Mamba2
mixer, one attention and one MLP block; a FastConformer that subsamples 10 ms
mel frames by 8 (one 80 ms frame a step); a Gemma3 EAR-TTS backbone; the RVQ
codec at 22,050 Hz with 1,764 samples a frame. The encoder is causal (no
right context, causal convolutions and subsampling, no per-utterance
normalisation), as the streaming encoders the real checkpoints use are, so
that hearing a session frame by frame gives what hearing it whole does.

The tokenizer is a byte-level BPE trained here on a fixed corpus: the same
files in every process, so stage0's text ids mean the same in stage1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LLM_FOLDER = "NemotronH"
INPUT_RATE = 16_000
OUTPUT_RATE = 22_050
_LLM_HIDDEN = 64
_ENCODER_D = 32
_TTS_HIDDEN = 64
PAD_BOOST = 0.5
# Each frame of the encoder sees this many frames before it.
ENCODER_LEFT_FRAMES = 32

_CORPUS = [
    "hello there how can I help you today",
    "the weather is sunny and warm",
    "please call the function get weather for paris",
    '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</TOOLCALL>',
    "thank you goodbye",
]
# The published tokenizer's function-channel marks are among its specials:
# start and end of a tool call, end of a tool's response.
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<SPECIAL_20>", "<SPECIAL_21>", "<SPECIAL_22>"]


def write(folder: Path) -> None:
    """The tiny checkpoint's config files into `folder` (no weights: random)."""
    llm = folder / LLM_FOLDER
    llm.mkdir(parents=True, exist_ok=True)
    vocab = _tokenizer(llm)
    _llm_config(llm, vocab)
    (folder / "config.json").write_text(json.dumps(config(), indent=1))


def _tokenizer(out: Path, vocab_size: int | None = None) -> int:
    """The BPE tokenizer into `out`; with `vocab_size`, its vocabulary filled to
    that many ids with tokens no text encodes to (the LLM's real vocabulary
    size, for a random model of the real shape: every id it can say decodes)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 20, trainer)
    if vocab_size is not None:
        tok = _filled(tok, vocab_size)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    fast.save_pretrained(str(out))
    return len(fast)


def _filled(tok: Any, vocab_size: int) -> Any:
    from tokenizers import Tokenizer, models

    spec = json.loads(tok.to_str())
    vocab: dict[str, int] = dict(spec["model"]["vocab"])
    merges: list[tuple[str, str]] = [(a, b) for a, b in spec["model"]["merges"]]
    # Byte-level characters only ("Ġ" is the space), so the decoder maps them back.
    vocab |= {f"Ġfill{i}": i for i in range(len(vocab), vocab_size)}
    filled = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    filled.pre_tokenizer, filled.decoder = tok.pre_tokenizer, tok.decoder
    filled.add_special_tokens(SPECIALS)
    return filled


# The tiny LLM's shape (nine_b.py gives the published one).
_LLM_SHAPE: dict[str, Any] = {
    "hidden_size": _LLM_HIDDEN,
    "layers_block_type": ["linear_attention", "full_attention", "mlp"],
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "intermediate_size": 128,
    "mamba_num_heads": 4,
    "mamba_head_dim": 16,
    "ssm_state_size": 16,
    "n_groups": 1,
    "chunk_size": 16,
    "max_position_embeddings": 4096,
}


def _llm_config(out: Path, vocab_size: int, shape: dict[str, Any] | None = None) -> None:
    """The NemotronH config into `out`, of `shape` (default: the tiny one)."""
    from transformers import NemotronHConfig

    cfg = NemotronHConfig(
        vocab_size=vocab_size,
        **(shape or _LLM_SHAPE),
        # No mamba_ssm kernels (none on this CPU, none in the GPU image): the torch path.
        use_mamba_kernels=False,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    cfg.architectures = ["NemotronHForCausalLM"]
    cfg.save_pretrained(str(out))


def config() -> dict[str, Any]:
    """NemotronVoiceChat's config (the dict its constructor takes); the LLM's
    and tokenizer's paths are relative to the checkpoint folder."""
    return {
        "model": {"stt": {"model": _stt()}, "speech_generation": _tts()},
        "data": {
            "frame_length": 0.08,
            "source_sample_rate": INPUT_RATE,
            "target_sample_rate": OUTPUT_RATE,
        },
    }


def _stt() -> dict[str, Any]:
    return {
        "pretrained_llm": LLM_FOLDER,
        "pretrained_weights": False,
        "trust_remote_code": False,
        "llm_attr_name": "model",
        "embed_tokens_attr_name": "embeddings",
        "source_sample_rate": INPUT_RATE,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "predict_user_text": False,
        # NeMo's own knob (DuplexSTTModel.forward): padding's logit raised so
        # that the random model is quiet in silence and talks over speech.
        "inference_pad_boost": PAD_BOOST,
        "perception": {
            "_target_": "nemo.collections.speechlm2.modules.perception.AudioPerceptionModule",
            "preprocessor": {
                "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
                "sample_rate": INPUT_RATE,
                "features": 80,
                "dither": 0.0,
                "pad_to": 0,
                "normalize": "NA",
            },
            "encoder": {
                "_target_": "nemo.collections.asr.modules.ConformerEncoder",
                "feat_in": 80,
                "d_model": _ENCODER_D,
                "n_heads": 2,
                "n_layers": 1,
                "subsampling": "dw_striding",
                "subsampling_factor": 8,
                "subsampling_conv_channels": 16,
                "causal_downsampling": True,
                "ff_expansion_factor": 2,
                "conv_kernel_size": 9,
                "conv_context_size": "causal",
                "att_context_size": [ENCODER_LEFT_FRAMES, 0],
                "att_context_style": "regular",
            },
            "modality_adapter": {
                "_target_": "nemo.collections.speechlm2.modules.perception.IdentityConnector",
                "d_model": _ENCODER_D,
            },
            "output_dim": _LLM_HIDDEN,
        },
        "optimizer": {"_target_": "torch.optim.AdamW"},
    }


def _tts() -> dict[str, Any]:
    backbone = {
        "hidden_size": _TTS_HIDDEN,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": 16,
        "use_cache": False,
    }
    encoder = {**backbone, "intermediate_size": 64, "head_dim": 16}
    return {
        "model": {
            "pretrained_lm_name": LLM_FOLDER,
            "bos_token": "<s>",
            "eos_token": "</s>",
            "pad_token": "<pad>",
            "audio_codec_run_dtype": "float32",
            "inference_guidance_scale": 0.5,
            # Greedy: no noise on the mixture's mean, the top mixture component.
            "inference_noise_scale": 0.0,
            "inference_top_p_or_k": 1,
            "codec_config": {
                "latent_size": 16,
                "n_fft": 16,
                "hop_length": 4,
                "base_hidden_size": 8,
                "channel_mult": [1, 2, 4],
                "rates": [7, 7, 9],  # x hop 4 = 1,764 samples: 80 ms at 22,050 Hz
                "num_blocks": 1,
                "kernel_size": 7,
                "groups": 1,
                "codebook_size": 32,
                "num_quantizers": 4,
                "wav_to_token_ratio": 1764,
            },
            "tts_config": {
                "use_gated_fusion_for_text_audio": True,
                "disable_eos_prediction": True,
                "use_bos_eos_emb": True,
                "use_subword_flag_emb": True,
                "num_delay_speech_tokens": 2,
                "backbone_type": "gemma3_text",
                "backbone_model_class": None,
                "backbone_config_class": None,
                "backbone_config": backbone,
                "latent_size": 16,
                "codebook_size": 32,
                "num_quantizers": 4,
                # None: the TTS reads no LLM embeddings (which would load the LLM).
                "context_hidden_size": None,
                "cas_config": {
                    "backbone_type": "t5gemma",
                    "backbone_model_class": None,
                    "backbone_config_class": None,
                    # The character-aware encoder's width must be the TTS's.
                    "backbone_config": {"is_encoder_decoder": False, "encoder": encoder},
                },
                "mog_head_config": {
                    "intermediate_size": 64,
                    "num_layers": 1,
                    "low_rank": 8,
                    "num_predictions": 8,
                    "min_log_std": -4.0,
                    "eps": 1e-6,
                },
                "p_uncond": 0.1,
                "label_smoothing": 0.01,
                "max_training_rate": 0.8,
                "quantizer_dropout": 0.5,
                "random_target_masking": False,
                "exponent": 3.0,
            },
        },
        "data": {
            "add_text_bos_and_eos_in_each_turn": True,
            "add_audio_prompt": True,
            "audio_prompt_duration": 0.4,
            "frame_length": 0.08,
            "source_sample_rate": OUTPUT_RATE,
            "target_sample_rate": OUTPUT_RATE,
        },
    }
