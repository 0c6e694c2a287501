"""Probes of one engine on a GPU, each against the engine as it comes (bench/recipes/GPU.md):
`python -m bench.probes.asr_gpu`, `.tts_gpu`, `.turn_gpu`."""
