"""`omlx import FILE.gguf` (or an Ollama model's name): a GGUF file (llama.cpp, Ollama, LM
Studio) made into an MLX model folder in the model directory (inference.gguf does the work)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .common import default_model_dir, human_bytes

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "import",
        help="import a GGUF file as an MLX model folder in the model folder",
        description="Convert a GGUF file (llama.cpp, Ollama, LM Studio) into an MLX model folder "
        "DIR/NAME that `omlx serve --model-dir DIR` serves: the weights through MLX's GGUF reader "
        "(Q4_0, Q4_1 and Q8_0 kept as MLX quantized weights, exactly; other types dequantized to "
        "float, or requantized with --quantize), the config from the GGUF keys, the tokenizer, chat "
        "template and special tokens from its metadata. Architectures: llama, qwen2, qwen3, gemma3; "
        "tokenizers: byte-level BPE ('gpt2') and SentencePiece ('llama'). The folder appears whole or "
        "not at all.",
    )
    p.add_argument(
        "file",
        metavar="FILE.gguf|OLLAMA-NAME",
        help="the GGUF file, or the name of an Ollama model as `ollama list` shows it (llama3.2:1b, "
        "NAMESPACE/NAME:TAG; no tag: latest), read from Ollama's models folder",
    )
    p.add_argument(
        "--ollama-models",
        default=None,
        metavar="DIR",
        help="Ollama's models folder (manifests/ and blobs/) for an Ollama name (default: the "
        "ollama_models setting, $OMLX_OLLAMA_MODELS; 'auto': $OLLAMA_MODELS, else ~/.ollama/models)",
    )
    p.add_argument(
        "--name",
        default=None,
        help="the model folder's name, NAME or ORG/NAME (default: the file's name less .gguf; "
        "for an Ollama name NAME:TAG, NAME-TAG)",
    )
    p.add_argument(
        "--quantize",
        type=int,
        choices=[4, 8],
        default=None,
        metavar="BITS",
        help="requantize the tensors that are not kept quantized to 4 or 8 bits (MLX's format, "
        "group size 64); default: keep them as float",
    )
    p.add_argument(
        "--model-dir",
        default=None,
        help="the folder of model folders (default $OMLX_MODEL_DIR, else $OMLX_HOME/models)",
    )
    p.set_defaults(run=run)


def run(args) -> int:
    from inference.gguf.importer import GgufImportError, import_gguf

    source = Path(args.file).expanduser()
    default = source.name.removesuffix(".gguf")
    if not source.exists() and not args.file.endswith(".gguf"):
        try:
            source, default = _ollama_source(args.file, args.ollama_models)
        except ValueError as exc:
            print(f"omlx import: {exc}", file=sys.stderr)
            return 2
    name = args.name or default
    if not _NAME.match(name) or ".." in name:
        print(
            f"omlx import: --name {name!r}: use letters, digits, '.', '_', '-', and at most one '/'",
            file=sys.stderr,
        )
        return 2
    dest = Path(args.model_dir or default_model_dir()).expanduser() / name
    print(f"importing {source} -> {dest}")
    try:
        import_gguf(source, dest, args.quantize, on_summary=_print_summary)
    except GgufImportError as exc:
        print(f"omlx import: {exc}", file=sys.stderr)
        return 2
    return 0


def _ollama_source(name: str, folder):
    """(the GGUF blob of the Ollama model ``name``, its default folder name), the blob checked
    against its manifest and its sha256 (inference.pool: the Models page's Import checks the
    same); ValueError says why not."""
    from inference.pool.app_import import ollama_folder, verify_blob
    from inference.pool.other_apps import OtherApps, find_ollama
    from omlx_site import config

    root = OtherApps.from_settings(None, folder or config.load()["ollama_models"]).ollama
    if root is None or not root.is_dir():
        raise ValueError(
            f"{name}: no such file, and no Ollama models folder to find it in "
            f"({root or 'none found, or off'}; --ollama-models DIR)"
        )
    found = find_ollama(root, name)
    print(f"{found.id}: Ollama blob {found.path}, checking its sha256")
    verify_blob(found.path)
    return found.path, ollama_folder(found.id)


def _print_summary(summary) -> None:
    for line in summary.lines:
        print(f"  {line}")
    print(
        f"wrote {summary.folder} ({human_bytes(summary.folder_bytes)}; the GGUF file: "
        f"{human_bytes(summary.source_bytes)}); serve it with "
        f"`omlx serve --model-dir {summary.folder.parent}`"
    )
