"""Session truth in Redis: fenced writes, every key name, what a takeover reads."""
