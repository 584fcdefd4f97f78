"""The scripted test model (inference/testkit/scripted.py): mlx-lm and transformers, loading
the folder with their own loaders, both decode exactly the script then end-of-sequence, after
short and long prompts, with and without tools in the template."""

import filecmp

import pytest

from inference.testkit.scripted import build_scripted_model

SCRIPT = (
    "The user asks for the weather in Paris. I will call the tool.\n</think>\n\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>'
)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
PROMPTS = [  # (messages, tools): a short prompt; a long one with tools and repeats of the script
    ([{"role": "user", "content": "hi"}], None),
    (
        [
            {"role": "system", "content": "Be brief. " * 50},
            {"role": "user", "content": ("What is the weather in Paris? " + SCRIPT) * 20},
        ],
        TOOLS,
    ),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_scripted_model(tmp_path_factory.mktemp("scripted") / "model", SCRIPT)


def _prompt_ids(tokenizer, messages, tools, **kwargs):
    ids = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=True, **kwargs
    )
    return list(getattr(ids, "input_ids", ids))


def test_mlx_lm_decodes_the_script_then_eos(folder):
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.generate import generate_step

    model, tokenizer = load(str(folder))
    for messages, tools in PROMPTS:
        ids = _prompt_ids(tokenizer, messages, tools)
        out = []
        for token, _ in generate_step(mx.array(ids), model, max_tokens=200):
            out.append(int(token))
            if token == tokenizer.eos_token_id:
                break
        assert out[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(out[:-1]) == SCRIPT


@pytest.mark.parametrize("script", [None, "ha " * 30 + "!"])  # None: SCRIPT; then 30 heads
def test_transformers_decodes_the_same(folder, tmp_path, script):
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if script is not None:
        folder = build_scripted_model(tmp_path / "ha", script)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    for messages, tools in PROMPTS:
        ids = torch.tensor([_prompt_ids(tokenizer, messages, tools)])
        out = model.generate(ids, max_new_tokens=200, do_sample=False)[0, ids.shape[1] :].tolist()
        assert out[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(out[:-1]) == (script or SCRIPT)


def test_other_prompt_ends(folder):
    """With enable_thinking false the prompt ends ``</think>\\n\\n``, which the script has after
    its reasoning: the model writes the rest of the script. A raw prompt that ends with no window
    of the script gets end-of-sequence at once."""
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.generate import generate_step

    model, tokenizer = load(str(folder))
    ids = _prompt_ids(tokenizer, *PROMPTS[0], enable_thinking=False)
    assert tokenizer.decode(ids).endswith("</think>\n\n")
    out = [int(t) for t, _ in generate_step(mx.array(ids), model, max_tokens=100)]
    assert tokenizer.decode(out[: out.index(tokenizer.eos_token_id)]) == SCRIPT.split("</think>\n\n")[1]
    ids = tokenizer.encode("Once upon a time", add_special_tokens=False)
    assert int(mx.argmax(model(mx.array([ids]))[0, -1])) == tokenizer.eos_token_id


def test_same_arguments_write_the_same_bytes(folder, tmp_path):
    again = build_scripted_model(tmp_path / "again", SCRIPT)
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(p.name for p in again.iterdir())
    assert filecmp.cmpfiles(folder, again, names, shallow=False)[0] == names


@pytest.mark.parametrize(
    "arch,script,message",
    [
        ("qwen3", "", "empty"),
        ("gemma3_text", "hi", "not 'gemma3_text'"),
        # a run of 33 tokens (the longest window) repeated with different successors
        ("qwen3", "ha " * 40 + "!", "cannot key this script"),
    ],
)
def test_bad_scripts_are_refused(tmp_path, arch, script, message):
    with pytest.raises(ValueError, match=message):
        build_scripted_model(tmp_path / "m", script, arch=arch)


@pytest.mark.parametrize(
    "arch,script,dtype",
    [
        (
            "qwen2",
            "Hello! The answer is 42, and the answer stays 42.",
            "float32",
        ),  # bias on q/k/v, no q/k norm
        ("llama", "x a b c d e f g; x a b c d e f h", "float32"),  # another generation prompt; a long repeat
        (
            "mistral",
            "ha ha ha ha ha ha ha ha ha ha, said he.",
            "float32",
        ),  # the fixed end is one token ([/INST])
        ("qwen3", "ha " * 30 + "!", "bfloat16"),  # a 31-token window, in bfloat16
    ],
)
def test_other_families_and_dtypes(tmp_path, arch, script, dtype):
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.generate import generate_step

    model, tokenizer = load(str(build_scripted_model(tmp_path / arch, script, arch=arch, dtype=dtype)))
    ids = _prompt_ids(tokenizer, *PROMPTS[1])
    out = [int(t) for t, _ in generate_step(mx.array(ids), model, max_tokens=80)]
    assert tokenizer.decode(out[: out.index(tokenizer.eos_token_id)]) == script


def test_command_line_and_management_command(folder, tmp_path):
    """`omlx build-model --script` and `manage.py build_test_model --script` write what
    build_scripted_model writes."""
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from omlx_site.cli import main

    assert main(["build-model", str(tmp_path / "cli"), "--arch", "qwen3", "--script", SCRIPT]) == 0
    assert filecmp.cmp(folder / "model.safetensors", tmp_path / "cli" / "model.safetensors", shallow=False)
    with pytest.raises(SystemExit):
        main(["build-model", str(tmp_path / "q"), "--script", "hi", "--quantize", "4"])
    call_command("build_test_model", str(tmp_path / "manage"), "--arch", "qwen3", "--script", SCRIPT)
    assert filecmp.cmp(
        tmp_path / "cli" / "model.safetensors", tmp_path / "manage" / "model.safetensors", shallow=False
    )
    with pytest.raises(CommandError):
        call_command(
            "build_test_model", str(tmp_path / "bad"), "--script", "hi", "--set", "num_hidden_layers=2"
        )
