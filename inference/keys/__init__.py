"""API keys with scopes (docs/api.md, "Authentication").

Two kinds of key open the API and the console: the one ``--api-key`` (every scope, the console's
login as before) and the keys made by `omlx keys create` or the console's Keys page (``ApiKey``
rows in inference/models.py, stored as sha256 digests, each with its scopes). With neither, omlx
is open as it always was.

- ``scopes``: the four scopes and what each opens.
- ``store``: create, list and revoke keys (the CLI and the console call it).
- ``ring``: the process's snapshot of the keys, reloaded when a key was created or revoked (by any
  process); a secret is checked against it in constant time.
- ``throttle``: failed keys and logins per client address; 429 past the limit.
- ``middleware``: authenticates every /v1 and /metrics request (``request.omlx_key``,
  ``request.omlx_scopes``); the routes then ask for their scope (inference/api/common/auth.py).
"""
