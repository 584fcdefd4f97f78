"""What a request may name as an image (issue 25 item 4), against a live `omlx serve` with a
vision model, through the official SDKs and raw HTTP:

- server files: read only inside --image-dir; a file outside, a missing one, a symlink (or a
  symlinked folder) out, a FIFO, /dev/zero all get one and the same 400, in every API's own
  envelope;
- pixels are counted from the header: a 20 KB PNG of 13,000 x 13,000 pixels is a 400;
- images per request are capped (OpenAI chat and the APIs that build their jobs in chat_job);
- http(s) images: off by default (tests/live/test_vision.py); when on, a URL whose host is this
  machine is refused before any connection (the local site never sees a request);
- the byte cap applies to data: URLs.
"""

import http.server
import os
import threading

import anthropic
import httpx
import openai
import pytest

from inference.vision.local_files import REFUSED
from tests.support.vision_pictures import bomb_png, data_url, image_message, noise_png

MAX_TOKENS = 4


@pytest.fixture(scope="module")
def server(vision_server):
    """The server tests/live/test_vision*.py share (vlm, tiny), with its --image-dir."""
    return vision_server[0]


@pytest.fixture(scope="module")
def files(vision_server, tmp_path_factory):
    """name -> path: a picture inside --image-dir and one outside; links, a FIFO, devices."""
    inside = vision_server[1] / "sources"
    inside.mkdir()
    outside = tmp_path_factory.mktemp("not-an-image-dir")
    (inside / "ok.png").write_bytes(noise_png(3))
    (outside / "secret.png").write_bytes(noise_png(4))
    (inside / "out.png").symlink_to(outside / "secret.png")
    (inside / "zero.png").symlink_to("/dev/zero")
    (inside / "linked").symlink_to(outside)
    os.mkfifo(inside / "pipe.png")
    return {
        "inside": inside / "ok.png",
        "outside": outside / "secret.png",
        "missing outside": outside / "missing.png",
        "missing inside": inside / "missing.png",
        "symlink out": inside / "out.png",
        "symlinked folder out": inside / "linked" / "secret.png",
        "symlink to /dev/zero": inside / "zero.png",
        "fifo inside": inside / "pipe.png",
        "/dev/zero": "/dev/zero",
        "/etc/passwd": "/etc/passwd",
        "file:// outside": (outside / "secret.png").as_uri(),
    }


def _post(server, messages, model="vlm"):
    body = {"model": model, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0}
    return httpx.post(server.url + "/v1/chat/completions", json=body, timeout=300)


def test_a_file_inside_image_dir_is_read(server, files):
    reply = _post(server, image_message(str(files["inside"])))
    assert reply.status_code == 200, reply.text


def test_every_refused_or_missing_file_gets_the_same_answer(server, files):
    """No oracle: whether a file exists, is a link, a FIFO or a device, the answer is the same
    (and /dev/zero is not read until the byte cap or the client's timeout)."""
    answers = {}
    for name, path in files.items():
        if name != "inside":
            reply = _post(server, image_message(str(path)))
            answers[name] = (reply.status_code, reply.json())
    first = answers["outside"]
    assert first[0] == 400 and first[1]["error"]["message"].endswith(REFUSED)
    assert {name: answer for name, answer in answers.items() if answer != first} == {}


def test_file_refusals_in_the_anthropic_and_responses_envelopes(server, files):
    with anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300) as c:
        with pytest.raises(anthropic.BadRequestError) as info:
            c.messages.create(
                model="vlm",
                max_tokens=MAX_TOKENS,
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "source": {"type": "url", "url": str(files["outside"])}},
                            {"type": "text", "text": "hi"},
                        ],
                    }
                ],
            )
    assert info.value.body["type"] == "error" and info.value.body["error"]["message"].endswith(REFUSED)
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300) as c:
        with pytest.raises(openai.BadRequestError) as info:
            c.responses.create(
                model="vlm",
                max_output_tokens=MAX_TOKENS,
                input=[
                    {
                        "role": "user",
                        "content": [{"type": "input_image", "image_url": str(files["missing inside"])}],
                    }
                ],
            )
    assert info.value.body["message"].endswith(REFUSED)


@pytest.mark.parametrize("width, height", [(13_000, 13_000), (6_000, 6_000)])
def test_too_many_pixels_are_refused_before_decoding(server, width, height):
    """A 20 KB PNG that decodes to 500 MB (PIL's own limit errs only above twice its cap: the
    6,000 x 6,000 one is refused by the pixel count alone)."""
    reply = _post(server, image_message(data_url(bomb_png(width, height))))
    assert reply.status_code == 400
    assert "more than 25 megapixels (setting max_image_megapixels" in reply.json()["error"]["message"]


def test_images_per_request_are_capped(server):
    part = {"type": "image_url", "image_url": {"url": data_url(noise_png(5, (8, 8)))}}
    reply = _post(server, [{"role": "user", "content": [part] * 17}])
    assert reply.status_code == 400
    assert "has 17 images; this server reads at most 16" in reply.json()["error"]["message"]
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    reply = httpx.post(
        server.url + "/v1/messages",
        json={
            "model": "vlm",
            "max_tokens": MAX_TOKENS,
            "messages": [{"role": "user", "content": [block] * 17}],
        },
        timeout=300,
    )
    assert reply.status_code == 400 and "at most 16" in reply.json()["error"]["message"]


class _Site(http.server.BaseHTTPRequestHandler):
    """A picture on 127.0.0.1, counting the requests it gets."""

    asked = 0

    def do_GET(self):
        _Site.asked += 1
        png = noise_png(6)
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(png)))
        self.end_headers()
        self.wfile.write(png)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def remote_server(serve):
    """Remote images on, a small byte cap."""
    return serve(
        "--allow-remote-images", "true", "--max-image-size", "64KiB", models={"vlm": ("llava", "tiny")}
    )


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"])
def test_remote_images_from_this_machine_are_refused(remote_server, site, host):
    reply = _post(remote_server, image_message(f"http://{host}:{site}/picture.png"))
    assert reply.status_code == 400, reply.text
    message = reply.json()["error"]["message"]
    assert "a loopback address: this server fetches images only from public addresses" in message
    assert _Site.asked == 0  # refused before connecting


def test_the_byte_cap_applies_to_data_urls(remote_server):
    png = noise_png(7, (200, 200))
    assert len(png) > 65536
    reply = _post(remote_server, image_message(data_url(png)))
    assert reply.status_code == 400
    assert "larger than 65536 bytes (setting max_image_size" in reply.json()["error"]["message"]
