"""The LLM: on vLLM (llm.py) or llama.cpp (llm_llamacpp.py), picked by the CPU
(cpu_choice.py), its prompt, history, loop stop and function calling."""
