"""Database models of the cache app (none yet)."""
