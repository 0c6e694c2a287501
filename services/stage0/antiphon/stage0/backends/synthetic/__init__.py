"""The `synthetic` backend: the cascade's VAD and turn model with scripted ASR and
LLM on a clock; load and fault tests only."""
