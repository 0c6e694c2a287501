"""Whisper: on CTranslate2 (asr.py) or in torch batched across sessions
(whisper_torch.py), and the streaming transcript of an utterance."""
