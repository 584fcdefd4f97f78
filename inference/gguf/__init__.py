"""GGUF files (llama.cpp, Ollama, LM Studio) made into MLX model folders that omlx serves.

``importer.import_gguf`` is the entry point (the ``omlx import`` command and other apps'
discovery call it). The file is read by MLX's own GGUF reader (``reader``); the config comes from
the ``{arch}.*`` keys (``config``), the weights are renamed and un-permuted as mlx-lm expects
(``weights``), and the tokenizer, chat template and special tokens come from
``tokenizer.ggml.*`` (``tokenizer``).
"""

from pathlib import Path


def importable_reason(path: Path) -> str:
    """What model discovery shows for a GGUF file (or a folder holding one): it is not served
    as it is, and the command that makes it servable (explicit: an import takes seconds to
    minutes and doubles the disk space, so it never happens behind a request)."""
    return f"GGUF: run `omlx import {path}` to serve it"
