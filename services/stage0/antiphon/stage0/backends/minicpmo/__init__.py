"""MiniCPM-o 4.5's thinker in full duplex: one-second units on vLLM's
resumable requests (issue 51). Not a registered backend yet: stage1's talker
and token2wav, and the worker's session, are still to come."""
