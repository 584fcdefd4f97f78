"""Database models of the inference app (none yet)."""
