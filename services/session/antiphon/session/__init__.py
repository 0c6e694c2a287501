"""The session service: the only owner of session truth, kept in Redis."""
