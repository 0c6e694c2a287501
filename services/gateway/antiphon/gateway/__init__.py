"""The WebSocket gateway: Realtime JSON at the edge, typed gRPC commands behind it."""
