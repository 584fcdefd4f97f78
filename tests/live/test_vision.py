"""Vision-language models end to end (issue 14 item 4): a live `omlx serve` with a random-weight
LLaVA (inference.testkit.vlm) and a text model, driven by the official openai and
anthropic SDKs.

- An image request gives the same greedy text as mlx-vlm's own ``generate`` on the same inputs
  (the folder's transformers processor, the same pixels), for data: URLs, file paths (in the
  server's --image-dir), Anthropic base64 blocks and Responses ``input_image`` parts; the image
  changes the output.
- The block cache keys the image's content: a repeated image after the same text is a hit up to
  the last token, a changed image never hits past the text before it; text-only requests to the
  vision model hit as usual.
- Refusals are 400s: http(s) URLs while allow_remote_images is off, images to a text model, a
  broken data: URL (what a request may name as an image: tests/live/test_vision_sources.py).
"""

import base64

import httpx
import openai
import pytest

from tests.support.sdk_clients import openai_client
from tests.support.vision_pictures import (
    PROMPT,
    anthropic_image_reply,
    data_url,
    image_message,
    write_pictures,
)

MAX_TOKENS = 12


@pytest.fixture(scope="module")
def vlm_dir(model_dir):
    return model_dir("llava", "tiny")


@pytest.fixture(scope="module")
def server(vision_server):
    """ "vlm" (LLaVA) and "tiny" (a text model), on the server test_vision_families.py shares."""
    return vision_server[0]


@pytest.fixture(scope="module")
def client(server):
    with openai_client(server.url, timeout=300, strict=False) as c:
        yield c


@pytest.fixture(scope="module")
def images(vision_server):
    folder = vision_server[1] / "vision"  # inside the server's --image-dir
    return write_pictures(folder, [(60, 60), (60, 60)])


@pytest.fixture(scope="module")
def reference(vlm_dir):
    """mlx-vlm's own greedy generate on the folder's processor outputs: text of (image path, text)."""
    import mlx.core as mx
    from mlx_vlm import generate, load
    from PIL import Image
    from transformers import AutoProcessor

    model, vlm_processor = load(str(vlm_dir))
    processor = AutoProcessor.from_pretrained(str(vlm_dir))

    def run(path, text=PROMPT):
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
        prompt = processor.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = processor(text=[prompt], images=[Image.open(path).convert("RGB")], return_tensors="np")
        result = generate(
            model,
            vlm_processor,
            "",
            input_ids=mx.array(inputs["input_ids"]),
            pixel_values=mx.array(inputs["pixel_values"]),
            max_tokens=MAX_TOKENS,
            temperature=0.0,
            verbose=False,
        )
        return result.text

    return run


def _chat(client, messages, model="vlm"):
    return client.chat.completions.create(
        model=model, messages=messages, max_tokens=MAX_TOKENS, temperature=0
    )


def test_discovery_marks_the_vision_model(server):
    rows = {row["id"]: row for row in httpx.get(server.url + "/v1/models/status", timeout=60).json()["data"]}
    assert rows["vlm"]["servable"] and rows["vlm"]["vision"] and rows["vlm"]["type"] == "llm"
    assert rows["tiny"]["servable"] and not rows["tiny"]["vision"]


def test_image_output_equals_mlx_vlm_generate(client, images, reference):
    first = _chat(client, image_message(data_url(images[0].read_bytes())))
    want = reference(images[0])
    assert first.choices[0].message.content == want
    second = _chat(client, image_message(str(images[1])))  # a file path
    assert second.choices[0].message.content == reference(images[1])
    assert want != reference(images[1])  # the image decides the output
    third = _chat(client, image_message(images[1].as_uri()))  # a file:// URL
    assert third.choices[0].message.content == second.choices[0].message.content


def test_streamed_image_answer_equals_the_whole_one(client, images, reference):
    stream = client.chat.completions.create(
        model="vlm", messages=image_message(str(images[0])), max_tokens=MAX_TOKENS, temperature=0, stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == reference(images[0])


def test_repeated_image_hits_and_changed_image_misses(client, images, vlm_dir):
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

    first = _chat(client, messages(data_url(images[0].read_bytes())))
    prompt_tokens = first.usage.prompt_tokens
    again = _chat(client, messages(data_url(images[0].read_bytes())))
    assert again.usage.prompt_tokens_details.cached_tokens == prompt_tokens - 1
    assert again.choices[0].message.content == first.choices[0].message.content
    changed = _chat(client, messages(data_url(images[1].read_bytes())))
    # The text before the image may hit; nothing from the image on.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(vlm_dir))
    text_before = len(tokenizer.encode("<|im_start|>user\n" + text, add_special_tokens=False))
    assert text_before > 8
    assert changed.usage.prompt_tokens == prompt_tokens
    assert changed.usage.prompt_tokens_details.cached_tokens <= text_before
    assert changed.choices[0].message.content != first.choices[0].message.content


def test_text_only_requests_keep_the_block_cache(client):
    messages = [{"role": "user", "content": "A text-only question for the vision model, long enough."}]
    first = _chat(client, messages)
    again = _chat(client, messages)
    assert again.usage.prompt_tokens_details.cached_tokens == first.usage.prompt_tokens - 1
    assert again.choices[0].message.content == first.choices[0].message.content


def test_anthropic_base64_image_block(server, images, reference):
    reply = anthropic_image_reply(server.url, "vlm", images[0].read_bytes(), MAX_TOKENS)
    assert reply == reference(images[0])


def test_responses_input_image(client, images, reference):
    response = client.responses.create(
        model="vlm",
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
    assert response.output_text == reference(images[1])
    items = client.responses.input_items.list(response.id).data
    assert [part.type for part in items[0].content] == ["input_image", "input_text"]


def test_remote_images_are_refused_by_default(client):
    with pytest.raises(openai.BadRequestError) as info:
        _chat(client, image_message("https://example.com/cat.png"))
    assert "allow_remote_images" in str(info.value)


def test_images_to_a_text_model_are_refused(client, images):
    with pytest.raises(openai.BadRequestError) as info:
        _chat(client, image_message(data_url(images[0].read_bytes())), model="tiny")
    assert "does not read images" in str(info.value)


def test_images_outside_user_messages_are_refused(client, images):
    with pytest.raises(openai.BadRequestError) as info:
        _chat(
            client,
            [
                {
                    "role": "system",
                    "content": [
                        {"type": "image_url", "image_url": {"url": data_url(images[0].read_bytes())}}
                    ],
                },
                {"role": "user", "content": "hi"},
            ],
        )
    assert "user messages only" in str(info.value)


@pytest.mark.parametrize(
    "url, message",
    [
        ("data:image/png;base64,!!!notbase64", "not valid base64"),
        ("data:image/png;base64," + base64.b64encode(b"not a picture").decode(), "not a readable picture"),
        ("/nonexistent/picture.png", "only regular files inside the folders of the image_dir setting"),
        ("ftp://example.com/x.png", "an image url is"),
    ],
)
def test_bad_images_get_a_400(client, url, message):
    with pytest.raises(openai.BadRequestError) as info:
        _chat(client, image_message(url))
    assert message in str(info.value)
