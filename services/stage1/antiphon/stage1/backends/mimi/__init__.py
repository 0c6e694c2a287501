"""The `mimi` backend: decodes a Moshi-architecture model's audio tokens
(duplex only). backend.py builds it; lockstep.py runs Mimi's decoder over
every session's row at once; session.py is one session's frames, cut to
exact 80 ms chunks at its rate by frames/resampler.py.
"""
