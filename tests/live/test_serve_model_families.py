"""Models of the new families through a live `omlx serve` and the OpenAI SDK: an MLX-format 4-bit
hybrid (Gated DeltaNet) folder, as `mlx_lm.convert -q` writes it, and a sliding-window MoE folder
(gpt_oss) are discovered, served, and their repeated prompts come from the block cache, also after a
restart (SSD tier)."""

import shutil

import openai
import pytest

from inference.testkit.quantize import quantize_model
from tests.support.server import ServerProcess

SYSTEM = (
    "You are a careful assistant for a coding agent. Read the request, think about the files it "
    "names, and answer with the smallest change that solves it. "
) * 3


@pytest.fixture(scope="module")
def models(tmp_path_factory, model_dir):
    root = tmp_path_factory.mktemp("family-models")
    quantize_model(model_dir("qwen3_5", "tiny"), root / "qwen3_5-4bit", bits=4)
    shutil.copytree(model_dir("gpt_oss", "tiny"), root / "gpt-oss-tiny")
    return root


def _chat(client, model, user):
    return client.chat.completions.create(
        model=model,
        max_tokens=6,
        temperature=0,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
    )


@pytest.mark.parametrize("model", ["qwen3_5-4bit", "gpt-oss-tiny"])
def test_served_and_cached_across_a_restart(models, model, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    answers = []
    for run in range(2):
        server = ServerProcess(["--model-dir", str(models)], home)
        try:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
            listed = {m.id for m in client.models.list().data}
            assert model in listed
            first = _chat(client, model, "Rename the helper in utils.py.")
            second = _chat(client, model, "Rename the helper in utils.py.")
        finally:
            server.stop()
        answers += [first.choices[0].message.content, second.choices[0].message.content]
        cached = [r.usage.prompt_tokens_details.cached_tokens for r in (first, second)]
        # All but the last prompt token: from RAM for the repeat, and after the restart from
        # the SSD tier for the first request too (the prompt's tail block, a hit at its end).
        assert cached == [0 if run == 0 else first.usage.prompt_tokens - 1, second.usage.prompt_tokens - 1]
    assert answers[0] == answers[1] == answers[2] == answers[3]
