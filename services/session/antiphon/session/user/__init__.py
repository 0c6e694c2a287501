"""The user's side: uncommitted input, listening to a sealed turn, turns heard."""
