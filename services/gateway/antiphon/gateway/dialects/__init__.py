"""Projection of typed session events into each dialect's JSON (duplex, OpenAI, native)."""
