"""The conversation history, its items, and the edits a client asks for."""
