"""The console's pages, one module each; auth.py has the login."""
