"""The assistant's side: responses, their playback, and the preemptive answer."""
