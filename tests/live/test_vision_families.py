"""Qwen2.5-VL, Qwen3-VL, Gemma 3 and Mistral 3 end to end (issue 14 item 4): a live `omlx serve`
with random-weight folders of these families (inference.testkit.vlm_qwen, vlm_gemma3,
vlm_mistral3) and a text model, driven by the official openai and anthropic SDKs. (Qwen2-VL shares
Qwen2.5-VL's code path; the engine tests, tests/reference/test_vision_engine.py, cover it too.)

- An image request gives the same greedy text as mlx-vlm's own ``generate`` on the same prompt
  and picture (mlx-vlm's processor, its image loading): data: URLs, file paths, Responses
  ``input_image`` parts and Anthropic base64 blocks.
- The block cache keys the image's content and grid: a repeated image after the same text is a
  hit with the same answer (the restored KV sits at its M-RoPE positions), a changed image never
  hits past the text before it, text-only requests hit as usual.
- ``/v1/models`` says which models read images.
"""

import io

import anthropic
import numpy as np
import pytest

from tests.support.sdk_clients import openai_client
from tests.support.vision_pictures import (
    PROMPT,
    SERVED_MODELS,
    anthropic_image_reply,
    data_url,
    image_message,
    write_pictures,
)

FAMILIES = ("qwen2_5_vl", "qwen3_vl", "gemma3", "mistral3")
MAX_TOKENS = 12


def _gradient_png() -> bytes:
    """A 60x60 picture unlike the noise ones (their pooled features are alike): a colour ramp."""
    from PIL import Image

    ramp = np.linspace(0, 255, 60, dtype="uint8")
    pixels = np.stack(
        [np.tile(ramp, (60, 1)), np.tile(ramp[:, None], (1, 60)), np.full((60, 60), 30, "uint8")], -1
    )
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def folders(model_dir):
    return {family: model_dir(family, "tiny") for family in FAMILIES}


@pytest.fixture(scope="module")
def server(vision_server):
    """Each family and "tiny" (a text model), on the server test_vision.py shares."""
    assert all(family in SERVED_MODELS for family in FAMILIES)
    return vision_server[0]


@pytest.fixture(scope="module")
def client(server):
    with openai_client(server.url, timeout=300, strict=False) as c:
        yield c


@pytest.fixture(scope="module")
def images(vision_server):
    """Two pictures of different sizes (another grid: other image token counts and positions),
    in the server's --image-dir."""
    return write_pictures(vision_server[1] / "families", [(60, 60), (60, 120)])


@pytest.fixture(scope="module")
def reference(folders):
    """mlx-vlm's own greedy generation on the family's folder: the text of its tokens for
    (family, image path, text), decoded whole (as the server does: mlx-vlm's streaming text
    drops an incomplete UTF-8 sequence at the end, where the tokenizer writes U+FFFD)."""
    from mlx_vlm import load, stream_generate

    loaded = {}

    def run(family, path, text=PROMPT):
        if family not in loaded:
            loaded[family] = load(str(folders[family]))
        model, processor = loaded[family]
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
        prompt = processor.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        tokens = [
            r.token
            for r in stream_generate(
                model, processor, prompt, image=[str(path)], max_tokens=MAX_TOKENS, temperature=0.0
            )
        ][:MAX_TOKENS]
        if tokens and tokens[-1] == processor.tokenizer.convert_tokens_to_ids("<|im_end|>"):
            tokens = tokens[:-1]
        return processor.tokenizer.decode(tokens)

    return run


def _chat(client, messages, model):
    return client.chat.completions.create(
        model=model, messages=messages, max_tokens=MAX_TOKENS, temperature=0
    )


def test_the_model_list_says_which_models_read_images(server, client):
    entries = {m.id: m for m in client.models.list().data}
    assert all(entries[f].vision is True for f in FAMILIES)
    assert entries["tiny"].vision is False
    with anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=60) as c:
        listed = {m.id: m.model_dump() for m in c.models.list().data}  # Anthropic's list format
    assert all(listed[f]["vision"] is True for f in FAMILIES) and listed["tiny"]["vision"] is False


@pytest.mark.parametrize("family", FAMILIES)
def test_image_output_equals_mlx_vlm_generate(client, images, reference, family):
    first = _chat(client, image_message(data_url(images[0].read_bytes())), family)
    want = reference(family, images[0])
    assert first.choices[0].message.content == want
    second = _chat(client, image_message(str(images[1])), family)  # a file path
    assert second.choices[0].message.content == reference(family, images[1])
    assert want != second.choices[0].message.content  # the image decides the output


@pytest.mark.parametrize("family", FAMILIES)
def test_responses_and_anthropic_images(server, client, images, reference, family):
    response = client.responses.create(
        model=family,
        max_output_tokens=MAX_TOKENS,
        temperature=0,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": data_url(images[1].read_bytes()), "detail": "auto"},
                    {"type": "input_text", "text": PROMPT},
                ],
            }
        ],
    )
    assert response.output_text == reference(family, images[1])
    reply = anthropic_image_reply(server.url, family, images[0].read_bytes(), MAX_TOKENS)
    assert reply == reference(family, images[0])


@pytest.mark.parametrize("family", FAMILIES)
def test_repeated_image_hits_and_changed_image_misses(client, images, folders, family):
    text = "Another question about the picture, with a longer text prefix before it?"

    def messages(url):
        return [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": text},
                    {"type": "image_url", "image_url": {"url": url}},
                    {"type": "text", "text": PROMPT},
                ],
            }
        ]

    first = _chat(client, messages(data_url(images[0].read_bytes())), family)
    prompt_tokens = first.usage.prompt_tokens
    again = _chat(client, messages(data_url(images[0].read_bytes())), family)
    assert again.usage.prompt_tokens_details.cached_tokens == prompt_tokens - 1
    assert again.choices[0].message.content == first.choices[0].message.content
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folders[family]))
    text_before = len(tokenizer.encode("<|im_start|>user" + text, add_special_tokens=False))
    assert text_before > 8
    changed = _chat(client, messages(data_url(_gradient_png())), family)  # same size, other pixels
    assert changed.usage.prompt_tokens == prompt_tokens
    assert changed.usage.prompt_tokens_details.cached_tokens <= text_before + 1
    assert changed.choices[0].message.content != first.choices[0].message.content


@pytest.mark.parametrize("family", FAMILIES)
def test_text_only_requests_keep_the_block_cache(client, family):
    messages = [
        {"role": "user", "content": f"A text-only question for {family}, long enough to fill blocks."}
    ]
    first = _chat(client, messages, family)
    again = _chat(client, messages, family)
    assert again.usage.prompt_tokens_details.cached_tokens == first.usage.prompt_tokens - 1
    assert again.choices[0].message.content == first.choices[0].message.content
