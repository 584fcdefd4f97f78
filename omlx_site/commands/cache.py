"""`omlx cache`: the KV block cache per model (hot tier from a running server, cold tier from the
SSD directory and its rows); `omlx cache clear`: remove cold-tier blocks (cache/cold_usage.py)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from .common import default_model_dir, human_bytes, omlx_home
from .models import discover
from .server import Server, add_server_flags


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "cache",
        help="show the KV cache per model (hot and SSD tiers); `omlx cache clear` empties the SSD tier",
        description="Show, per model, the KV blocks of the SSD (cold) tier: files on disk and "
        "their rows in the database, and the RAM (hot) tier of the models a running `omlx serve` "
        "has loaded (asked at --url). Models are named from the folder that wrote their blocks.",
    )
    _add_common(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=run_show)
    actions = p.add_subparsers(dest="cache_action")
    clear = actions.add_parser(
        "clear",
        help="remove SSD-tier blocks (all models, or one with --model)",
        description="Remove the SSD-tier KV blocks of every model, or of one model (--model), "
        "files first, then their database rows. While a server answers at --url this refuses: "
        "the server's RAM tier would keep the blocks and its index of the SSD tier would still "
        "name the removed files. Stop the server first, or pass --force (the server then treats "
        "the removed blocks as misses and recomputes them).",
    )
    _add_common(clear, default=argparse.SUPPRESS)
    clear.add_argument(
        "--model", help="a model's name (as `omlx cache` shows it), its folder, or its fingerprint"
    )
    clear.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    clear.add_argument("--force", action="store_true", help="clear even while a server answers at --url")
    clear.set_defaults(run=run_clear)


def _add_common(parser, **kwargs) -> None:
    parser.add_argument(
        "--paged-ssd-cache-dir",
        help="the SSD tier's directory (default $OMLX_COLD_CACHE_DIR, else $OMLX_HOME/cache)",
        **kwargs,
    )
    parser.add_argument(
        "--model-dir",
        action="append",
        help="folder of model folders, to name the models (default $OMLX_MODEL_DIR, else $OMLX_HOME/models)",
        **kwargs,
    )
    add_server_flags(parser, **kwargs)


def cold_root(args) -> Optional[Path]:
    value = getattr(args, "paged_ssd_cache_dir", None) or os.environ.get("OMLX_COLD_CACHE_DIR")
    if value is None:
        return omlx_home() / "cache"
    return None if value.lower() in ("", "off", "none") else Path(value).expanduser()


def collect(args) -> dict:
    """The report `omlx cache` prints: one row per fingerprint, and where it came from."""
    from cache import orm_index  # the cold tier's modules (30-50 ms): not at every `omlx` start
    from cache.cold_usage import usage

    root = cold_root(args)
    server = Server(getattr(args, "url", None), getattr(args, "api_key", None))
    report = {"cold_dir": str(root) if root else None, "server": None, "note": None, "models": []}
    hot = _hot_rows(server, report)
    names = _names(getattr(args, "model_dir", None))
    rows: Dict[str, dict] = {}
    on_disk = root is not None and root.is_dir()
    if on_disk:
        orm_index.setup()  # the rows (cache/cold_index.py): this command starts Django itself
    for u in usage(root) if on_disk else []:
        rows[u.fingerprint] = {
            "fingerprint": u.fingerprint,
            "model": _name(u.model_path, names),
            "model_path": u.model_path,
            "loaded_as": None,
            "hot": None,
            "cold": {
                "files": u.files,
                "bytes": u.bytes,
                "rows": u.rows,
                "row_bytes": u.row_bytes,
                "tokens": u.tokens,
                "last_used": u.last_used,
            },
        }
    for h in hot:
        fp = h.get("fingerprint")
        if fp is None:
            continue
        row = rows.setdefault(
            fp,
            {
                "fingerprint": fp,
                "model": h.get("id"),
                "model_path": None,
                "loaded_as": None,
                "hot": None,
                "cold": None,
            },
        )
        row["loaded_as"], row["hot"] = h.get("id"), h.get("hot")
        row["model"] = row["model"] or h.get("id")
    report["models"] = sorted(rows.values(), key=lambda r: (r["model"] or "~", r["fingerprint"]))
    return report


def run_show(args) -> int:
    report = collect(args)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"SSD tier: {report['cold_dir'] or 'off'}")
    if report["note"]:
        print(f"({report['note']})")
    if not report["models"]:
        print("no cached blocks")
        return 0
    table = [("MODEL", "FINGERPRINT", "HOT (RAM)", "SSD BLOCKS", "SSD SIZE", "ROWS", "LAST USED")]
    for r in report["models"]:
        hot, cold = r["hot"], r["cold"] or {}
        table.append(
            (
                (r["model"] or "? (name not recorded)") + (" [loaded]" if r["loaded_as"] else ""),
                r["fingerprint"][:12],
                f"{hot['blocks']} / {human_bytes(hot['bytes'])}" if hot else "-",
                str(cold.get("files", 0)),
                human_bytes(cold.get("bytes", 0)),
                str(cold.get("rows", 0)),
                _ago(cold.get("last_used")),
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
    if any(r["cold"] and r["cold"]["files"] != r["cold"]["rows"] for r in report["models"]):
        print(
            "(files and rows differ where a server is writing, or after a crash: the next "
            "server start reconciles them)"
        )
    return 0


def run_clear(args) -> int:
    from cache import orm_index  # as in collect
    from cache.cold_usage import clear

    root = cold_root(args)
    if root is None:
        print("omlx cache clear: the SSD tier is off (--paged-ssd-cache-dir off)", file=sys.stderr)
        return 1
    server = Server(getattr(args, "url", None), getattr(args, "api_key", None))
    if server.get("/v1/models") is not None and not args.force:
        print(
            f"omlx cache clear: a server is running at {server.url}; stop it first, or pass "
            "--force (it then treats the removed blocks as misses; its RAM tier keeps its own)",
            file=sys.stderr,
        )
        return 1
    report = collect(args)
    targets = [r for r in report["models"] if r["cold"] and (r["cold"]["files"] or r["cold"]["rows"])]
    if args.model:
        targets = [r for r in targets if _matches(r, args.model)]
        if not targets:
            known = sorted({r["model"] or r["fingerprint"] for r in report["models"] if r["cold"]})
            print(
                f"omlx cache clear: no SSD-tier blocks of {args.model!r} in {root}"
                + (f" (there are: {', '.join(known)})" if known else ""),
                file=sys.stderr,
            )
            return 1
    if not targets:
        print(f"nothing to clear in {root}")
        return 0
    files = sum(r["cold"]["files"] for r in targets)
    size = sum(r["cold"]["bytes"] for r in targets)
    what = f"{files} blocks ({human_bytes(size)}) of {len(targets)} model(s) from {root}"
    if not args.yes:
        if not sys.stdin.isatty():
            print(f"omlx cache clear: would remove {what}; pass --yes to do it", file=sys.stderr)
            return 1
        if input(f"remove {what}? [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing removed")
            return 1
    orm_index.setup()
    result = clear(root, [r["fingerprint"] for r in targets])
    print(
        f"removed {result.files} block files ({human_bytes(result.bytes)}) and {result.rows} rows "
        f"of {len(result.fingerprints)} model(s)"
    )
    return 0


def _hot_rows(server: Server, report: dict) -> List[dict]:
    answer = server.get("/v1/cache/status")
    if answer is None:
        report["note"] = f"no server answers at {server.url}: RAM tier not shown"
        return []
    why = server.refused(answer)
    if why:
        report["note"] = f"{why}: RAM tier not shown"
        return []
    report["server"] = server.url
    return [r for r in answer.data.get("data", []) if isinstance(r, dict)]


def _names(model_dirs) -> Dict[str, str]:
    """Resolved folder path -> model name, from discovery in the model folder(s)."""
    dirs = [Path(d).expanduser() for d in (model_dirs or [default_model_dir()])]
    names = {}
    for row in discover(dirs):
        try:
            names[str(Path(row["path"]).resolve())] = row["id"]
        except (OSError, TypeError):
            continue
    return names


def _name(path: Optional[str], names: Dict[str, str]) -> Optional[str]:
    if not path:
        return None
    return names.get(path) or Path(path).name


def _matches(row: dict, wanted: str) -> bool:
    if wanted in (row["model"], row["loaded_as"], row["model_path"]):
        return True
    if row["model_path"] and Path(wanted).expanduser().resolve() == Path(row["model_path"]):
        return True
    return len(wanted) >= 8 and row["fingerprint"].startswith(wanted.lower())


def _ago(t: Optional[float]) -> str:
    if t is None:
        return "-"
    s = max(0.0, time.time() - t)
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= n:
            return f"{s / n:.0f}{unit} ago"
    return f"{s:.0f}s ago"
