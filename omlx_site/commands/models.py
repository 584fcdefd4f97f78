"""`omlx models`: the models in the model folder, with their state in a running server."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

from omlx_site import config

from .common import default_model_dir, human_bytes
from .server import Server, add_server_flags


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "models",
        help="list the models: name, type, size, loaded / pinned / TTL",
        description="List the model folders found in the model folder(s), with their type and "
        "size on disk, then the models of the Hugging Face cache ($OMLX_HF_CACHE, default "
        "huggingface_hub's), then LM Studio's and Ollama's models ($OMLX_LMSTUDIO_MODELS, "
        "$OMLX_OLLAMA_MODELS), each with its origin. When an `omlx serve` answers at --url, "
        "its view is shown: which models "
        "are loaded, pinned, and their idle TTL. When none answers, the folders on disk are "
        "listed and the loaded state is unknown.",
    )
    p.add_argument(
        "--model-dir",
        action="append",
        default=None,
        help="folder of model folders; repeat it for several (default $OMLX_MODEL_DIR, "
        "else $OMLX_HOME/models)",
    )
    add_server_flags(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=run)


def discover(model_dirs: List[Path], hf_cache_dir: Optional[Path] = None, apps=None) -> List[dict]:
    """Model folders on disk as rows: id, path, origin, type, size_bytes, servable, reason (the
    model pool's discovery: depth 1 and 2, kinds, reasons; ``apps``: other apps' models)."""
    # inference.pool (its metrics, the engines' bookkeeping): only when folders are listed,
    # not at every `omlx` start
    from inference.pool.discovery import discover as discover_folders

    return [
        {
            "id": f.id,
            "path": str(f.path),
            "origin": f.origin,
            "type": f.kind,
            "size_bytes": f.size_bytes,
            "servable": f.servable,
            "reason": f.reason,
            "base": f.base,  # a LoRA adapter's base model id
        }
        for f in discover_folders(model_dirs, hf_cache_dir=hf_cache_dir, apps=apps).values()
    ]


def _hf_cache_dir() -> Optional[Path]:
    """The Hugging Face cache `omlx serve` would search ($OMLX_HF_CACHE, settings.json, default)."""
    return config.load()["hf_cache"]


def _other_apps():
    """LM Studio's and Ollama's folders as `omlx serve` would search them."""
    from inference.pool.other_apps import OtherApps

    values = config.load()
    return OtherApps.from_settings(values["lmstudio_models"], values["ollama_models"])


def run(args) -> int:
    model_dirs = [Path(d).expanduser() for d in (args.model_dir or [default_model_dir()])]
    server = Server(args.url, args.api_key)
    hf_cache_dir = _hf_cache_dir()
    report = {
        "server": None,
        "source": "disk",
        "model_dirs": [str(d) for d in model_dirs],
        "hf_cache": str(hf_cache_dir) if hf_cache_dir else None,
        "note": None,
    }
    rows: Optional[List[dict]] = None
    served: List[str] = []
    status = server.get("/v1/models/status")
    if status is None:
        report["note"] = f"no server answers at {server.url}: folders on disk, loaded state unknown"
    elif status.status == 200 and status.data is not None and isinstance(status.data.get("data"), list):
        report.update(server=server.url, source="server")
        rows = [_from_status(r) for r in status.data["data"]]
    else:
        listed = server.get("/v1/models") if status.status == 404 else status
        why = server.refused(listed) if listed is not None else None
        if listed is None or why:
            report["note"] = (
                f"{why or 'no server answers at ' + server.url}: folders on disk, loaded state unknown"
            )
        else:
            report.update(server=server.url, source="disk+server")
            report["note"] = (
                f"the server at {server.url} lists the models it serves but not their loaded state"
            )
            served = [m.get("id") for m in listed.data.get("data", []) if isinstance(m, dict)]
    if rows is None:
        rows = [
            dict(r, loaded=None, pinned=None, ttl_seconds=None, served=None)
            for r in discover(model_dirs, hf_cache_dir, _other_apps())
        ]
        if report["source"] == "disk+server":
            for r in rows:
                r["served"] = r["id"] in served
            rows += [
                {
                    "id": i,
                    "path": None,
                    "origin": None,
                    "type": None,
                    "size_bytes": None,
                    "servable": True,
                    "reason": "served, but not found in the model folder here",
                    "loaded": None,
                    "pinned": None,
                    "ttl_seconds": None,
                    "served": True,
                }
                for i in served
                if not any(r["id"] == i for r in rows)
            ]
    report["models"] = rows
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    _print_table(rows, report)
    return 0


def _from_status(r: dict) -> dict:
    return {
        "id": r.get("id"),
        "path": r.get("path"),
        "origin": r.get("origin"),
        "type": r.get("type"),
        "size_bytes": r.get("size_bytes"),
        "servable": r.get("servable", True),
        "reason": r.get("reason"),
        "base": r.get("base"),
        "loaded": r.get("loaded"),
        "pinned": r.get("pinned"),
        "ttl_seconds": r.get("ttl_seconds"),
        "served": r.get("servable", True),
        "alias": r.get("alias"),
        "active_requests": r.get("active_requests"),
    }


def _state(r: dict) -> str:
    if r.get("loaded") is None:
        return {True: "served", False: "not served"}.get(r.get("served"), "-")
    parts = ["loaded" if r["loaded"] else "not loaded"]
    if r.get("pinned"):
        parts.append("pinned")
    if r.get("ttl_seconds"):
        parts.append(f"ttl {r['ttl_seconds']:g}s")
    return ", ".join(parts)


def _print_table(rows: List[dict], report: dict) -> None:
    if report["source"] == "server":
        print(f"models of the server at {report['server']}")
    else:
        print(
            f"models in {', '.join(report['model_dirs'])}"
            + (f" and the Hugging Face cache {report['hf_cache']}" if report["hf_cache"] else "")
        )
    if report["note"]:
        print(f"({report['note']})")
    if not rows:
        print("no model folders found (`omlx pull ORG/NAME` downloads one)")
        return
    table = [("NAME", "ORIGIN", "TYPE", "SIZE", "STATE", "NOTE")]
    for r in rows:
        table.append(
            (
                r["id"],
                r.get("origin") or "-",
                r.get("type") or "-",
                human_bytes(r.get("size_bytes")),
                _state(r),
                r.get("reason") or (f"LoRA adapter over {r['base']}" if r.get("base") else ""),
            )
        )
    widths = [max(len(str(row[i])) for row in table) for i in range(5)]
    for row in table:
        print(("  ".join(str(v).ljust(w) for v, w in zip(row[:5], widths)) + "  " + row[5]).rstrip())
    sys.stdout.flush()
