"""A chat request with n > 1 submits n engine requests with the same prompt: the prompt is
computed once and the other choices reuse it (in process, over the tiny model)."""

import threading
import time
from django.test import override_settings

from inference.pool import close_pool, get_pool
from tests.unit.test_api_inprocess import api, request, served_models  # noqa: F401  (fixtures)

WORDS = (
    "the cache keeps every block of a long prompt so that the next request finds it and "
    "computes only what is new while the engine streams tokens to many users at once "
).split()


def test_chat_n_choices_compute_the_prompt_once(api, tmp_path):  # noqa: F811
    with override_settings(OMLX_COLD_CACHE_DIR=tmp_path):  # nothing cached by earlier runs
        try:
            _chat_n_choices()
        finally:
            close_pool()


def _chat_n_choices():
    content = " ".join(WORDS[i % len(WORDS)] for i in range(700))
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": content}],
        "n": 4,
        "max_tokens": 6,
        "temperature": 0,
    }
    engine = get_pool().engine("tiny")

    def hold(e):
        # Keep the engine thread between two steps until all four choices are in its inbox, so
        # that they arrive together however fast the tiny model computes the first one.
        deadline = time.monotonic() + 60
        while e._inbox.qsize() < 4 and time.monotonic() < deadline:
            time.sleep(0.001)

    holder = threading.Thread(target=engine.call, args=(hold,))
    holder.start()
    status, response = request("POST", "/v1/chat/completions", body)
    holder.join()
    assert status == 200, response
    prompt_tokens = response["usage"]["prompt_tokens"]
    assert prompt_tokens > 2 * 256  # several whole blocks of the default block size
    texts = [c["message"]["content"] for c in response["choices"]]
    assert len(texts) == 4 and len(set(texts)) == 1  # greedy: the same answer from shared KV
    stats = engine.call(lambda e: e.prefix_cache.snapshot())["lookups"]
    # The first choice computed the prompt; the other three found all of it but the last token.
    assert stats["cold_hit_tokens"] == 0 and stats["hot_hit_tokens"] == 3 * (prompt_tokens - 1)
