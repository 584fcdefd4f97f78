"""Prompt token counts in the view process without loading a model: the model folder's tokenizer
alone (loaded once per folder and cached), rendering a job's messages with the worker's own code,
so that a count equals the ``prompt_tokens`` the engine will report for the same job. Messages
with images also use the folder's image processor (inference.vision), which expands each image
into its tokens as the worker does."""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Tuple

from inference import generation
from inference.generation import GenerationJob
from inference.pool import get_pool

from inference.api.common.errors import ApiError

logger = logging.getLogger("omlx.api")

MAX_TOKENIZERS = 8  # models whose tokenizer stays loaded here; the least recently used goes first

_tokenizers: "OrderedDict[Tuple[Path, int], Tuple[object, threading.Lock]]" = OrderedDict()
_load_lock = threading.Lock()


def _tokenizer(path: Path) -> Tuple[object, threading.Lock]:
    """The tokenizer of a model folder and the lock that serialises its use (a Rust tokenizer
    must not be used from two threads at once). Reloaded when the folder's config changes."""
    from mlx_lm.utils import load_tokenizer

    config_file = path / "config.json"
    key = (path, config_file.stat().st_mtime_ns)
    with _load_lock:
        entry = _tokenizers.get(key)
        if entry is None:
            for old in [k for k in _tokenizers if k[0] == path]:
                del _tokenizers[old]
            config = json.loads(config_file.read_text())
            tokenizer = load_tokenizer(path, eos_token_ids=config.get("eos_token_id"))
            entry = _tokenizers[key] = (tokenizer, threading.Lock())
            while len(_tokenizers) > MAX_TOKENIZERS:
                _tokenizers.popitem(last=False)
        _tokenizers.move_to_end(key)
        return entry


def count_prompt_tokens(job: GenerationJob) -> int:
    """Tokens of the job's rendered prompt (blocking: run it off the event loop). ApiError 404
    for an unknown model, 400 when the chat template rejects the messages."""
    path = get_pool().path(job.model)
    if path is None:
        raise ApiError(404, f"The model '{job.model}' does not exist", param="model")
    job = generation.with_model_settings(job, get_pool().settings(job.model))  # as the worker
    try:
        tokenizer, lock = _tokenizer(path)
    except Exception as exc:
        logger.error("the tokenizer of %s cannot be loaded", job.model, exc_info=exc)
        raise ApiError(
            500, f"The tokenizer of '{job.model}' cannot be loaded (the details are in the server's log)"
        ) from None
    with lock:
        try:
            ids, text = generation.chat_prompt(tokenizer, job)
        except Exception as exc:  # a chat template that rejects the messages raises anything
            raise ApiError(
                400, f"The messages cannot be rendered with the model's chat template: {exc}"
            ) from None
    if generation.image_urls(job.messages):
        return _count_with_images(path, job, text)
    return len(ids)


def _count_with_images(path: Path, job: GenerationJob, text: str) -> int:
    """A prompt with images counts the image tokens the processor expands them to, as the
    worker's (inference.generation.vision_prompt)."""
    from inference.vision import images, model, prompt
    from inference.vision.limits import ImageLimits

    config = json.loads((path / "config.json").read_text())
    if not model.reads_images(config):
        raise ApiError(400, f"The model '{job.model}' does not read images (not a vision-language model)")
    try:
        limits = ImageLimits.from_settings()
        pictures = [images.load_image(url, limits) for url in generation.image_urls(job.messages)]
        return len(prompt.prepare(model.ProcessorOnly(path, config), text, pictures).model_ids)
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None
