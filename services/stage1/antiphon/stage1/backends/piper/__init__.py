"""The `piper` backend: a Piper voice speaks the LLM's text, with word marks.

backend.py builds it; tts.py is the voice (onnxruntime on the CPU, or the
voice's graph in torch); on a GPU every session's sentences share batches
(voice_batch.py), replayed as CUDA graphs (voice_graphs.py); assets.py finds
the installed voice. Importing this package loads none of them.
"""
