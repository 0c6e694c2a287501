"""MiniCPM-o 4.5 (OpenBMB): its Hugging Face configuration, tokenizer and
image processor written here (the published ones are remote code on the hub,
which nothing here downloads), which checkpoint a worker serves
(checkpoint.py) and the tiny random one tests use (tiny.py). vLLM runs its
thinker (`MiniCPMO4_5`: a Qwen3 LLM hearing a Whisper encoder and seeing
through SigLIP and a resampler)."""
