"""The `minicpmo` backend: MiniCPM-o 4.5's thinker in full duplex, one-second
units on vLLM's resumable requests (issue 51). Its talker and token2wav
(stage1) are still to come."""
