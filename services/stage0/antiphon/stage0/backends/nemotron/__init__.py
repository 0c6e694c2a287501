"""stage0's `nemotron` backend: Nemotron VoiceChat's listening half (NeMo's
DuplexSTTModel), its rows stepped together one 80 ms frame at a time."""
