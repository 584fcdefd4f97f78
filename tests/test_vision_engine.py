"""The engine with a vision model, in process: image prompts prefilled in chunks that cut through
the image's tokens, and image and text requests decoding in one batch, give mlx-vlm's own greedy
tokens (stream_generate on the same inputs)."""
import numpy as np
import pytest

from inference.engine import Engine, SamplingParams

MAX_TOKENS = 10


@pytest.fixture(scope="module")
def vlm_dir(model_dir):
    return model_dir("llava", "tiny")


def _image(seed):
    from PIL import Image

    return Image.fromarray((np.random.default_rng(seed).random((60, 60, 3)) * 255).astype("uint8"))


@pytest.fixture(scope="module")
def prompts(vlm_dir):
    """(text, images) of a few chat prompts, rendered with the folder's template."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(str(vlm_dir))
    render = lambda content: processor.tokenizer.apply_chat_template(  # noqa: E731
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False)
    return [
        (render([{"type": "text", "text": "Look:"}, {"type": "image"}, {"type": "text", "text": "What?"}]), [_image(1)]),
        (render([{"type": "image"}, {"type": "text", "text": "Say more about it."}]), [_image(2)]),
    ]


@pytest.fixture(scope="module")
def reference(vlm_dir):
    import mlx.core as mx
    from mlx_vlm import load, stream_generate

    model, processor = load(str(vlm_dir))

    def run(vision_prompt):
        out = stream_generate(model, processor, "", input_ids=mx.array([vision_prompt.model_ids]),
                              pixel_values=mx.array(vision_prompt.pixel_values), max_tokens=MAX_TOKENS,
                              temperature=0.0)
        return [r.token for r in out][:MAX_TOKENS]

    return run


def _collect(stream):
    tokens = []
    for event in stream:
        tokens += event.token_ids
    return tokens


def test_chunked_image_prefill_and_mixed_batches_equal_mlx_vlm(vlm_dir, prompts, reference):
    from inference.vision.prompt import prepare

    engine = Engine(vlm_dir, prefill_chunk_size=5, prefix_cache=False)
    try:
        vision = engine.loaded.vision
        params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
        prepared = [prepare(vision, text, images) for text, images in prompts]
        want = [reference(p)[:MAX_TOKENS] for p in prepared]
        assert want[0] != want[1]
        streams = [engine.submit(p.key_ids, params, vision=p) for p in prepared]
        text_ids = engine.encode(prompts[1][0].replace("<image>", ""))
        text_stream = engine.submit(text_ids, params)
        got = [_collect(s) for s in streams]
        alone = _collect(engine.submit(text_ids, params))
        assert got == want
        assert _collect(text_stream) == alone  # the text row in the mixed batch is undisturbed
    finally:
        engine.close()


def test_preempted_image_requests_replay_to_the_same_tokens(vlm_dir, prompts, reference):
    """A preempted image request is computed again from its prompt and its output so far: the
    range with the image runs on image embeddings followed by the generated tokens' embeddings."""
    from inference.vision.prompt import prepare

    tokens = 24
    engine = Engine(vlm_dir, max_kv_tokens=80, max_concurrent_requests=3, prefix_cache=False)
    try:
        vision = engine.loaded.vision
        params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
        prepared = [prepare(vision, text, images) for text, images in prompts + prompts[:1]]
        streams = [engine.submit(p.key_ids, params, vision=p) for p in prepared]
        got = [_collect(s) for s in streams]
        assert engine.scheduler.num_preemptions > 0
    finally:
        engine.close()
    import mlx.core as mx
    from mlx_vlm import load, stream_generate

    model, processor = load(str(vlm_dir))
    for p, out in zip(prepared, got):
        want = [r.token for r in stream_generate(model, processor, "", input_ids=mx.array([p.model_ids]),
                                                 pixel_values=mx.array(p.pixel_values), max_tokens=tokens,
                                                 temperature=0.0)][:tokens]
        assert out[:len(want)] == want


def _last(stream):
    tokens, usage = [], None
    for event in stream:
        tokens += event.token_ids
        usage = event.usage or usage
    return tokens, usage


def test_image_blocks_come_back_from_the_cold_tier_after_a_restart(vlm_dir, prompts, tmp_path):
    """The key ids travel through the SSD tier's block files: after a restart the same image is
    a cold hit with the same output, a changed image is not."""
    from inference.vision.prompt import prepare

    settings = dict(cache_block_size=8, paged_ssd_cache_dir=str(tmp_path / "cold"))
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    text, pictures = prompts[0]
    engine = Engine(vlm_dir, **settings)
    try:
        first = prepare(engine.loaded.vision, text, pictures)
        want, usage = _last(engine.submit(first.key_ids, params, vision=first))
        assert usage.cached_tokens == 0
    finally:
        engine.close()
    engine = Engine(vlm_dir, **settings)
    try:
        vision = engine.loaded.vision
        again = prepare(vision, text, pictures)
        got, usage = _last(engine.submit(again.key_ids, params, vision=again))
        assert got == want
        whole = (len(again.key_ids) - 1) // 8 * 8
        assert usage.cold_cached_tokens >= whole > again.image_positions[-1]
        other = prepare(vision, text, [_image(7)])
        changed, usage = _last(engine.submit(other.key_ids, params, vision=other))
        assert usage.cached_tokens <= other.image_positions[0] and changed != want
    finally:
        engine.close()
