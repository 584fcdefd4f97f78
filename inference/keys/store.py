"""Create, list and revoke keys (`omlx keys`, the console's Keys page). The secret exists only in
``create``'s answer: the row keeps its digest."""

from __future__ import annotations

import re
import secrets
from typing import Iterable, List, Optional, Tuple

from . import scopes as scope_names
from .ring import PREFIX, digest, touch_stamp

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._@:-]{0,63}$")


def create(name: Optional[str] = None, scopes: Iterable[str] = (), share_cache: bool = False) -> Tuple:
    """-> (the ApiKey row, the secret). ValueError for a bad or taken name or an unknown scope."""
    from inference.models import ApiKey

    chosen = scope_names.parse(scopes)
    key_id = secrets.token_hex(4)
    while ApiKey.objects.filter(key_id=key_id).exists():
        key_id = secrets.token_hex(4)
    name = (name or "").strip() or f"key-{key_id}"
    if not NAME.match(name):
        raise ValueError("name: 1 to 64 letters, digits, spaces or ._@:- (starting with a letter or digit)")
    if ApiKey.objects.filter(name=name).exists():
        raise ValueError(f"name: a key named {name!r} exists already")
    secret = f"{PREFIX}{key_id}-{secrets.token_urlsafe(32)}"
    row = ApiKey.objects.create(
        key_id=key_id,
        name=name,
        digest=digest(secret),
        scopes=scope_names.ordered(chosen),
        shares_cache=share_cache,
    )
    touch_stamp()
    return row, secret


def list_keys() -> List:
    from inference.models import ApiKey

    return list(ApiKey.objects.all())


def revoke(id_or_name: str):
    """Deletes the key with that id (or else that name) and returns its row; LookupError if none."""
    from inference.models import ApiKey

    row = ApiKey.objects.filter(key_id=id_or_name).first() or ApiKey.objects.filter(name=id_or_name).first()
    if row is None:
        raise LookupError(f"no key has the id or name {id_or_name!r}")
    row.delete()
    touch_stamp()
    return row
