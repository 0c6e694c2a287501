"""The GPU recipes: carry scripts, wheel lists, the runbook (GPU.md), and the
summary of the whole stack's GPU runs (`python -m bench.recipes.voice_summary`)."""
