"""Projection of typed session events into each dialect's JSON (duplex, OpenAI, native;
GPT-Live's halves are `antiphon.gateway.live`'s)."""
