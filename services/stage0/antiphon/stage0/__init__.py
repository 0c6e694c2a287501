"""Stage0 worker: VAD, ASR and LLM cores behind the session-facing gRPC servicer."""
