"""The engine with a vision model, in process, for each family served with images (LLaVA, Gemma 3,
Mistral 3 and the M-RoPE families Qwen2-VL, Qwen2.5-VL, Qwen3-VL): image prompts prefilled in chunks that cut
through the image's tokens, image and text requests decoding in one batch, preempted requests
replayed, and prompts restored from the block cache (hot tier, cold tier after a restart) all
give mlx-vlm's own greedy tokens (stream_generate on the same inputs).

For the M-RoPE families the positions of a token depend on the image grids before it (three
axes, and a rope delta for every token after an image): a cache hit restores KV computed at
those positions and the rest of the prompt and the decode must continue at the right ones.
"""

import numpy as np
import pytest

from inference.engine import Engine, SamplingParams

MAX_TOKENS = 10
FAMILIES = ("llava", "gemma3", "mistral3", "qwen2_5_vl", "qwen2_vl", "qwen3_vl")


@pytest.fixture(scope="module", params=FAMILIES)
def vlm_dir(request, model_dir):
    return model_dir(request.param, "tiny")


def _image(seed, shape=(60, 60)):
    from PIL import Image

    return Image.fromarray((np.random.default_rng(seed).random(shape + (3,)) * 255).astype("uint8"))


def _render(vlm_dir, content):
    from inference.vision.model import _processor

    import json

    config = json.loads((vlm_dir / "config.json").read_text())
    tokenizer = _processor(str(vlm_dir), 0, config["model_type"]).tokenizer
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )


@pytest.fixture(scope="module")
def prompts(vlm_dir):
    """(text, images) of a few chat prompts, rendered with the folder's template; the second
    image is twice as wide (another grid for the Qwen-VL families)."""
    return [
        (
            _render(
                vlm_dir,
                [{"type": "text", "text": "Look:"}, {"type": "image"}, {"type": "text", "text": "What?"}],
            ),
            [_image(1)],
        ),
        (
            _render(vlm_dir, [{"type": "image"}, {"type": "text", "text": "Say more about it."}]),
            [_image(2, (60, 120))],
        ),
    ]


@pytest.fixture(scope="module")
def reference(vlm_dir):
    """mlx-vlm's stream_generate on a prepared prompt's ids, pixels and grids: its first tokens."""
    import mlx.core as mx
    from mlx_vlm import load, stream_generate

    model, processor = load(str(vlm_dir))

    def run(p, tokens=MAX_TOKENS):
        extras = {k: mx.array(v) for k, v in p.extras.items()}
        ids = mx.array([p.model_ids])
        out = stream_generate(
            model,
            processor,
            "",
            input_ids=ids,
            mask=mx.ones(ids.shape, dtype=mx.int32),
            pixel_values=mx.array(p.pixel_values),
            max_tokens=tokens,
            temperature=0.0,
            **extras,
        )
        return [r.token for r in out][:tokens]

    return run


def _collect(stream):
    tokens = []
    for event in stream:
        tokens += event.token_ids
    return tokens


def _last(stream):
    tokens, usage = [], None
    for event in stream:
        tokens += event.token_ids
        usage = event.usage or usage
    return tokens, usage


def test_chunked_image_prefill_and_mixed_batches_equal_mlx_vlm(vlm_dir, prompts, reference):
    from inference.vision.prompt import prepare

    engine = Engine(vlm_dir, prefill_chunk_size=5, prefix_cache=False)
    try:
        vision = engine.loaded.vision
        params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
        prepared = [prepare(vision, text, images) for text, images in prompts]
        want = [reference(p) for p in prepared]
        assert want[0] != want[1]
        streams = [engine.submit(p.key_ids, params, vision=p) for p in prepared]
        text_ids = engine.encode(_render(vlm_dir, [{"type": "text", "text": "Say more about it."}]))
        text_stream = engine.submit(text_ids, params)
        got = [_collect(s) for s in streams]
        alone = _collect(engine.submit(text_ids, params))
        assert got == want
        assert _collect(text_stream) == alone  # the text row in the mixed batch is undisturbed
    finally:
        engine.close()


def test_preempted_image_requests_replay_to_the_same_tokens(vlm_dir, prompts, reference):
    """A preempted image request is computed again from its prompt and its output so far: the
    range with the image runs on image embeddings followed by the generated tokens' embeddings
    (and, for M-RoPE, the generated tokens' positions shifted by the rope delta)."""
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
    for p, out in zip(prepared, got):
        assert out == reference(p, tokens)


def test_a_block_cache_hit_continues_at_the_image_positions(vlm_dir, prompts, reference):
    """The same image and text, then another question after them: the second request restores
    the KV of the image (and the text before the question) from the hot tier and computes the
    rest; its tokens equal mlx-vlm's, which computes everything."""
    from inference.vision.prompt import prepare

    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    picture = [_image(3, (60, 120))]
    head = [{"type": "text", "text": "Here is a picture:"}, {"type": "image"}]
    texts = [
        _render(vlm_dir, head + [{"type": "text", "text": q}])
        for q in ("What colour is it, mostly?", "Where could it have been taken, do you think?")
    ]
    engine = Engine(vlm_dir, cache_block_size=4)
    try:
        vision = engine.loaded.vision
        first = prepare(vision, texts[0], picture)
        got, usage = _last(engine.submit(first.key_ids, params, vision=first))
        assert usage.cached_tokens == 0 and got == reference(first)
        second = prepare(vision, texts[1], picture)
        got, usage = _last(engine.submit(second.key_ids, params, vision=second))
        assert usage.cached_tokens > second.image_positions[-1]  # the image came from the cache
        assert got == reference(second)
        again = prepare(vision, texts[1], picture)
        got_again, usage = _last(engine.submit(again.key_ids, params, vision=again))
        assert usage.cached_tokens >= len(again.key_ids) - 4 and got_again == got
    finally:
        engine.close()


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


def test_the_image_grid_is_part_of_the_key(vlm_dir):
    """Qwen-VL: a plain picture 56x112 and its 112x56 transpose have the same patch values (all
    patches alike) and token count but other grids, so other M-RoPE positions: other key ids."""
    import json

    from inference.vision.model import MROPE_FAMILIES, ProcessorOnly
    from inference.vision.prompt import prepare
    from PIL import Image

    config = json.loads((vlm_dir / "config.json").read_text())
    if config["model_type"] not in MROPE_FAMILIES:
        pytest.skip("one position index: tokens are placed by their order, not by a grid")
    vision = ProcessorOnly(vlm_dir, config)
    text = _render(vlm_dir, [{"type": "image"}, {"type": "text", "text": "Which way up?"}])
    patch = config["vision_config"]["patch_size"] * 4
    wide, tall = (
        prepare(vision, text, [Image.new("RGB", size, (90, 120, 150))])
        for size in ((2 * patch, patch), (patch, 2 * patch))
    )
    assert np.array_equal(wide.pixel_values, tall.pixel_values)
    assert wide.model_ids == tall.model_ids
    assert wide.extras["image_grid_thw"].tolist() != tall.extras["image_grid_thw"].tolist()
    assert wide.key_ids != tall.key_ids


def test_text_requests_prefilled_together_equal_each_alone(vlm_dir):
    """Text-only requests to a vision model share prefill forward passes (batch caches of
    different histories; M-RoPE families: positions from each row's own offset) and give the
    tokens each gives alone."""
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    engine = Engine(vlm_dir, prefill_chunk_size=6, prefix_cache=False)
    try:
        texts = [
            "A short one.",
            "A much longer question about nothing at all, to make rows differ in length.",
        ]
        ids = [engine.encode(_render(vlm_dir, [{"type": "text", "text": t}])) for t in texts]
        alone = [_collect(engine.submit(i, params)) for i in ids]
        together = [engine.submit(i, params) for i in ids]
        assert [_collect(s) for s in together] == alone
    finally:
        engine.close()


def test_two_images_of_different_sizes(vlm_dir, reference):
    """Two pictures of different sizes in one prompt (Qwen-VL and Mistral 3: different token
    counts): the output equals mlx-vlm's; each image's tokens are keyed by that image, so
    changing the second one changes the key ids from its first token on, not before."""
    from inference.vision.prompt import prepare

    text = _render(
        vlm_dir,
        [
            {"type": "image"},
            {"type": "text", "text": "and"},
            {"type": "image"},
            {"type": "text", "text": "Compare them."},
        ],
    )
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    engine = Engine(vlm_dir, prefill_chunk_size=7, prefix_cache=False)
    try:
        vision = engine.loaded.vision
        first = prepare(vision, text, [_image(4), _image(5, (60, 120))])
        assert _collect(engine.submit(first.key_ids, params, vision=first)) == reference(first)
    finally:
        engine.close()
    other = prepare(vision, text, [_image(4), _image(6, (60, 120))])
    assert other.model_ids == first.model_ids and len(first.digests) == 2
    alone = prepare(vision, _render(vlm_dir, [{"type": "image"}]), [_image(4)])
    second_start = first.image_positions[len(alone.image_positions)]  # the second image's first token
    change = next(i for i, (a, b) in enumerate(zip(first.key_ids, other.key_ids)) if a != b)
    assert change == second_start
