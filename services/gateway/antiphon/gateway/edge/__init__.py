"""Who may open a socket or mint a secret: the edge and its gate, API keys and
their limits, client secrets and the session config a secret pins."""
