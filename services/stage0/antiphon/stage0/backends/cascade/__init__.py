"""The `cascade` backend: VAD and end of turn (listening/), Whisper (asr/), an LLM
(llm/), and the per-session pipeline that joins them (session.py)."""
