"""LM Studio's and Ollama's model folders as those apps write them, built in a temporary folder
for the tests of inference/pool/other_apps.py: a real MLX folder under LM Studio's
PUBLISHER/NAME layout, and an Ollama store with real manifests (OCI-like JSON) naming blobs by
their sha256, the model layer a small GGUF file written by the ``gguf`` package's GGUFWriter."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

LMSTUDIO_MLX = "mlx-community/Tiny-Chat-4bit"  # the id of the MLX folder served in place
LMSTUDIO_GGUF = "bartowski/Tiny-Chat-GGUF/Tiny-Chat-Q4_K_M.gguf"
OLLAMA_LIBRARY = "tinychat:1b"  # manifests/registry.ollama.ai/library/tinychat/1b
OLLAMA_NAMESPACED = "someone/tinychat:latest"
OLLAMA_OTHER_REGISTRY = "hf.co/org/tinychat-gguf:Q8_0"


def write_gguf(path: Path, arch: str = "llama") -> Path:
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def build_lmstudio(root: Path, mlx_folder: Path) -> Path:
    """``root`` as LM Studio's models folder: one MLX model folder (a copy of ``mlx_folder``) and
    one GGUF file (with a vision projector beside it, which is not a model)."""
    shutil.copytree(mlx_folder, root / LMSTUDIO_MLX)
    gguf_dir = root / LMSTUDIO_GGUF.rsplit("/", 1)[0]
    gguf_dir.mkdir(parents=True)
    write_gguf(root / LMSTUDIO_GGUF)
    write_gguf(gguf_dir / "mmproj-Tiny-Chat-f16.gguf", arch="clip")
    return root


def add_blob(root: Path, data: bytes) -> str:
    """Store ``data`` as Ollama does (blobs/sha256-HEX); its digest ``sha256:HEX``."""
    hexdigest = hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / f"sha256-{hexdigest}").write_bytes(data)
    return f"sha256:{hexdigest}"


def write_manifest(root: Path, name: str, layers: list) -> Path:
    """A manifest for the Ollama name ``name`` (``NAME:TAG``, ``NS/NAME:TAG`` or ``REG/NS/NAME:TAG``)."""
    path, tag = name.rsplit(":", 1)
    parts = path.split("/")
    parts = ["registry.ollama.ai", "library"] + parts if len(parts) == 1 else parts
    parts = ["registry.ollama.ai"] + parts if len(parts) == 2 else parts
    manifest = root / "manifests" / Path(*parts) / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    config = add_blob(root, b'{"model_format":"gguf","model_family":"llama"}')
    document = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "digest": config,
            "size": 46,
        },
        "layers": layers,
    }
    manifest.write_text(json.dumps(document))
    return manifest


def model_layers(root: Path, gguf: bytes) -> list:
    layer = lambda kind, data: {  # noqa: E731
        "mediaType": f"application/vnd.ollama.image.{kind}",
        "digest": add_blob(root, data),
        "size": len(data),
    }
    return [
        layer("model", gguf),
        layer("template", b"{{ .Prompt }}"),
        layer("params", b'{"stop":["<|im_end|>"]}'),
        layer("license", b"Apache 2.0"),
    ]


def build_ollama(root: Path, scratch: Path) -> Path:
    """``root`` as Ollama's models folder with three models (library, namespaced, another
    registry), all of one GGUF blob."""
    gguf = write_gguf(scratch / "tiny.gguf").read_bytes()
    for name in (OLLAMA_LIBRARY, OLLAMA_NAMESPACED, OLLAMA_OTHER_REGISTRY):
        write_manifest(root, name, model_layers(root, gguf))
    return root
