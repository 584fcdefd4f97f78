"""`omlx pull ORG/NAME`: download a model folder from the Hugging Face hub with huggingface_hub
(inference/hub.py)."""

from __future__ import annotations

import os
import sys

from inference.hub import HubError, check_repo_id, pull

from .common import default_model_dir
from .progress import PullProgress
from .pull_events import JsonProgress


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "pull",
        help="download a model from the Hugging Face hub into the model folder",
        description="Download the model ORG/NAME from the Hugging Face hub into "
        "MODEL_DIR/ORG/NAME, where `omlx serve` finds it. Files are checked against the hub's "
        "sizes and hashes; an interrupted pull continues where it stopped when run again, and "
        "the folder appears only once it is complete. When the repository has safetensors "
        "weights, other weight formats (.bin, .pth, .gguf, ...) are skipped. The downloads go "
        "through huggingface_hub: HF_ENDPOINT, HF_TOKEN (or the token of `hf auth login`) and "
        "HF_HUB_OFFLINE apply.",
    )
    p.add_argument("repo", metavar="ORG/NAME", help="the model's id on the hub")
    p.add_argument("--revision", default="main", help="branch, tag or commit (default main)")
    p.add_argument(
        "--model-dir",
        default=None,
        help="folder of model folders (default $OMLX_MODEL_DIR, else $OMLX_HOME/models)",
    )
    p.add_argument(
        "--hf-endpoint",
        default=None,
        help="the hub or a mirror of it (default $HF_ENDPOINT, else https://huggingface.co)",
    )
    p.add_argument(
        "--token",
        default=None,
        help="access token for gated or private models (default $HF_TOKEN, else the "
        "token saved by `hf auth login`)",
    )
    p.add_argument(
        "--all-files",
        action="store_true",
        help="download every file of the repository, other weight formats included",
    )
    p.add_argument(
        "--progress",
        choices=("text", "json"),
        default="text",
        help="text: a bar on a terminal, else a line per file (stderr); json: one JSON "
        "object per line on stdout, for programs (default text)",
    )
    p.set_defaults(run=run)


def run(args) -> int:
    try:
        check_repo_id(args.repo)
    except ValueError as exc:
        print(f"omlx pull: {exc}", file=sys.stderr)
        return 2
    model_dir = args.model_dir or default_model_dir()
    token = args.token or os.environ.get("HF_TOKEN") or None
    progress = JsonProgress() if args.progress == "json" else PullProgress()
    try:
        path = pull(
            args.repo,
            model_dir,
            revision=args.revision,
            endpoint=args.hf_endpoint,
            token=token,
            progress=progress,
            all_files=args.all_files,
        )
    except FileExistsError as exc:  # pulled before: nothing to do (its files are not re-checked)
        print(f"omlx pull: {exc}", file=sys.stderr)
        return 0
    except (HubError, ValueError, OSError) as exc:
        print(f"\nomlx pull: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nomlx pull: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    finally:
        if isinstance(progress, JsonProgress):
            progress.close()
    if args.progress == "text":  # (json: the finish event names the folder)
        print(f"{args.repo} is in {path}")
    return 0
