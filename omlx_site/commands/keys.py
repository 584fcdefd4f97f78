"""`omlx keys create | list | revoke`: the API keys with scopes (inference/keys/), in the database
of $OMLX_HOME (or $OMLX_DATABASE). A running server sees a change at its next request."""

from __future__ import annotations

import json
import sys

SCOPE_HELP = (
    "inference (chat, completions, responses, messages, embeddings, rerank, the model list), "
    "models (load, unload, rescan, status, model settings), mcp (MCP servers, tools, execute), "
    "admin (the console, /metrics, cache status, step traces)"
)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "keys",
        help="create, list and revoke API keys with scopes",
        description="API keys with scopes, kept hashed in omlx's database. Once any key exists "
        "(or --api-key is set), every /v1 request and /metrics needs a key: `Authorization: "
        "Bearer KEY` or `x-api-key: KEY`. A key without the scope a route needs gets a 403; "
        f"scopes: {SCOPE_HELP}. The --api-key of `omlx serve` stays the one key with every scope. "
        "A running server sees changes at once; the console's websockets of a revoked key close.",
    )
    actions = p.add_subparsers(dest="keys_action", required=True)
    create = actions.add_parser(
        "create",
        help="make a key and print it (once: only its hash is kept)",
        description="Make a key and print it. Only its sha256 is stored: copy the key now.",
    )
    create.add_argument("--name", help="a name to know it by (unique; default key-<id>)")
    create.add_argument(
        "--scope",
        action="append",
        default=[],
        metavar="SCOPE",
        help=f"a scope it gets; repeat for several (default inference). {SCOPE_HELP}",
    )
    create.add_argument(
        "--share-cache",
        action="store_true",
        help="its requests share KV cache blocks with other clients' (default: the key's requests "
        "are kept apart in the cache)",
    )
    create.set_defaults(run=run_create)
    listing = actions.add_parser(
        "list",
        help="list the keys (never the keys themselves)",
        description="List the keys: "
        "id, name, scopes, whether it shares the cache, when it was made and last used (to the "
        "minute).",
    )
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(run=run_list)
    revoke = actions.add_parser(
        "revoke",
        help="delete a key: its requests get a 401 from then on",
        description="Delete a key by id or name. A running server refuses it from its next "
        "request; console logins made with it end and their websockets close.",
    )
    revoke.add_argument("key", metavar="ID|NAME")
    revoke.set_defaults(run=run_revoke)


def _setup() -> None:
    import os

    import django
    from django.core.management import call_command

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "omlx_site.settings")
    django.setup()
    call_command("migrate", interactive=False, verbosity=0)


def run_create(args) -> int:
    _setup()
    from inference.keys import store

    try:
        row, secret = store.create(args.name, args.scope, args.share_cache)
    except ValueError as exc:
        print(f"omlx keys create: {exc}", file=sys.stderr)
        return 2
    print(secret)
    print(
        f"key {row.key_id} ({row.name}), scopes: {', '.join(row.scopes)}"
        f"{', shares the cache' if row.shares_cache else ''}. Copy it now: it is not shown again.",
        file=sys.stderr,
    )
    return 0


def _row(row) -> dict:
    return {
        "id": row.key_id,
        "name": row.name,
        "scopes": list(row.scopes),
        "shares_cache": row.shares_cache,
        "created": row.created.isoformat(timespec="seconds"),
        "last_used": row.last_used.isoformat(timespec="minutes") if row.last_used else None,
    }


def run_list(args) -> int:
    _setup()
    from inference.keys import store

    rows = [_row(row) for row in store.list_keys()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no keys (`omlx keys create` makes one)")
        return 0
    table = [("ID", "NAME", "SCOPES", "SHARES CACHE", "CREATED", "LAST USED")] + [
        (
            r["id"],
            r["name"],
            ",".join(r["scopes"]),
            "yes" if r["shares_cache"] else "no",
            r["created"],
            r["last_used"] or "never",
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for line in table:
        print("  ".join(value.ljust(width) for value, width in zip(line, widths)).rstrip())
    return 0


def run_revoke(args) -> int:
    _setup()
    from inference.keys import store

    try:
        row = store.revoke(args.key)
    except LookupError as exc:
        print(f"omlx keys revoke: {exc}", file=sys.stderr)
        return 1
    print(f"revoked key {row.key_id} ({row.name})")
    return 0
