"""Silero VAD, Smart Turn and the endpointing built on them: when the user speaks,
pauses and stops."""
