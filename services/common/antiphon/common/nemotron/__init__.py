"""Nemotron VoiceChat (NeMo's `NemotronVoiceChat`): which checkpoint a worker
serves and how NeMo builds it (checkpoint.py), and the tiny random one tests
use (tiny.py). stage0 runs its listening half (perception and the LLM),
stage1 its speaking half (EAR-TTS and the codec)."""
