"""Crash triage tools: fault injection, crash-bundle replay, out-of-memory probe, sanitizer wrapper."""
