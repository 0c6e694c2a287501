"""Translation of client JSON into typed session commands: the event table, its
fields, audio formats, session patches, conversation items and tools."""
