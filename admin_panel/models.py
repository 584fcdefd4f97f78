"""Database models of the admin_panel app (none yet)."""
