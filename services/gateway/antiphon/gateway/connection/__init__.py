"""One writer per client socket: its states, the session stream and its fail-over
to another replica, the replay cursor, the bounded outbox and the close codes."""
