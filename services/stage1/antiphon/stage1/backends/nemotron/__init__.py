"""The `nemotron` backend: Nemotron VoiceChat's speaking half (NeMo's
DuplexEARTTS and its RVQ codec; duplex only), speaking the text tokens
stage0's `nemotron` backend makes. backend.py builds it; lockstep.py steps
every session's row at once: tts_rows.py (EAR-TTS, its backbone's cache
shared by the rows in kv_columns.py, starting from prompt.py's speaker
prompt) and codec_rows.py (the codec, streamed per row). A session's frames
are frames/session.py's, as `mimi`'s are.
"""
