"""Anthropic-compatible routes (/v1/messages), answered in Anthropic's error envelope."""
