"""Plumbing shared by every Antiphon service: config, logs, metrics, traces, gRPC bootstrap."""
