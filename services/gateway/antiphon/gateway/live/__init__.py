"""GPT-Live (`/v1/live/sessions`): OpenAI's protocol for model-decided full duplex,
projected from the same typed session events (docs/gpt-live.md)."""
