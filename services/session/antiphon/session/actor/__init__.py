"""The session actor and what passes between it and its client: its mail, the
attached stream, deadlines, commands, the journal of events, and rejections."""
