"""The `minicpmo` backend: MiniCPM-o 4.5's talker and token2wav, speaking the thinker's text."""
