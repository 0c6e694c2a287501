"""Stage1 worker (the talker): streams text into speech audio with text marks."""
