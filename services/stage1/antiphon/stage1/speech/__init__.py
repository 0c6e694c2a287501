"""The pipeline stage1's text-in backends share (`piper`, `synthetic`).

Text arrives as the LLM streams it and is cut into clauses (clauses.py),
voiced first clauses first (scheduler.py), spoken early when the listener is
about to run out of audio (playout.py), one session at a time
(synthesis.py), by a backend's `Voice` (voice.py); sessions.py builds a
worker's session factory around one voice.
"""
