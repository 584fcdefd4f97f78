"""GGUF files (llama.cpp, Ollama, LM Studio) made into MLX model folders that omlx serves.

``importer.import_gguf`` is the entry point (the ``omlx import`` command and other apps'
discovery call it). The file is read by MLX's own GGUF reader (``reader``); the config comes from
the ``{arch}.*`` keys (``config``), the weights are renamed and un-permuted as mlx-lm expects
(``weights``), and the tokenizer, chat template and special tokens come from
``tokenizer.ggml.*`` (``tokenizer``).
"""
