"""The `synthetic` backend: a tone whose length follows the text (voice.py),
for load and fault tests; backend.py builds it."""
