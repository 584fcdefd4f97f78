"""The Models page (/admin/models/) in process: Django's test client against a real model pool."""

import pytest
from django.test import Client, override_settings

from inference.pool import get_pool
from tests.support.admin_console import console, post, wait_until  # noqa: F401  (console: a fixture)

pytestmark = pytest.mark.django_db(transaction=True)
ACTION = "/admin/models/action/"


def _load(client, model_id):
    response = post(client, ACTION, {"action": "load", "model": model_id})
    assert response.status_code in (200, 202), response.content
    if response.status_code == 202:  # still loading: the row says so, and the table polls
        html = response.content.decode()
        assert "loading…" in html and 'hx-trigger="every 2s"' in html
        again = post(client, ACTION, {"action": "load", "model": model_id})
        assert again.status_code in (200, 409)  # loaded meanwhile, or "a load is running already"
    wait_until(lambda: get_pool().loaded(model_id) is not None)
    # The table stops polling once the job is over and shows the model loaded.
    table = wait_until(
        lambda: (lambda r: r if b"every 2s" not in r.content else None)(client.get("/admin/models/table/"))
    )
    return table.content.decode()


def test_the_page_lists_every_folder_with_its_state(console):
    page = console.get("/admin/models/")
    assert page.status_code == 200
    html = page.content.decode()
    for model_id in ("tiny", "tiny2", "other", "broken"):
        assert f'data-model="{model_id}"' in html
    assert "cannot be served: " in html  # broken: no config.json
    assert html.count("not loaded") >= 2 and "Model memory" in html and "Process memory" in html
    assert "every 2s" not in html  # nothing is loading: no polling


def test_the_poll_keeps_the_table_until_a_state_changes(console):
    from admin_panel.views.models import _states

    now = _states(get_pool().status()["data"])
    assert console.get("/admin/models/table/", {"since": now}).status_code == 204
    get_pool().engine("tiny")  # loaded elsewhere (the API): the next poll brings the new table
    response = console.get("/admin/models/table/", {"since": now})
    assert response.status_code == 200 and 'class="badge ok">loaded' in response.content.decode()


def test_load_pin_ttl_alias_settings_and_unload(console):
    html = _load(console, "tiny")
    assert 'class="badge ok">loaded' in html

    response = post(console, ACTION, {"action": "pin", "model": "tiny", "pinned": "true"})
    assert response.status_code == 200 and get_pool().settings("tiny")["pinned"] is True
    assert "Unpin" in response.content.decode()
    busy = post(console, ACTION, {"action": "unload", "model": "tiny"})
    assert busy.status_code == 409 and "pinned; unpin it first" in busy.content.decode()
    assert get_pool().loaded("tiny") is not None

    response = post(console, ACTION, {"action": "ttl", "model": "tiny", "ttl_seconds": "600"})
    assert response.status_code == 200 and "600 s" in response.content.decode()
    assert get_pool().settings("tiny")["ttl_seconds"] == 600
    response = post(console, ACTION, {"action": "alias", "model": "tiny", "alias": "small-one"})
    assert response.status_code == 200 and get_pool().resolve("small-one") == "tiny"
    assert ">small-one<" in response.content.decode()

    response = post(
        console,
        ACTION,
        {
            "action": "settings",
            "model": "small-one",
            "temperature": "0.3",
            "top_k": "20",
            "context_length": "",
            "model_type": "",
            "chat_template_kwargs": '{"enable_thinking": false}',
        },
    )
    assert response.status_code == 200, response.content
    values = get_pool().settings("tiny")
    assert values["temperature"] == 0.3 and values["top_k"] == 20
    assert values["chat_template_kwargs"] == {"enable_thinking": False}

    post(console, ACTION, {"action": "pin", "model": "tiny", "pinned": "false"})
    response = post(console, ACTION, {"action": "unload", "model": "tiny"})
    assert response.status_code in (200, 202)
    wait_until(lambda: get_pool().loaded("tiny") is None)
    assert (
        'class="badge ok">loaded'
        not in wait_until(
            lambda: (lambda r: r if b"every 2s" not in r.content else None)(
                console.get("/admin/models/table/")
            )
        ).content.decode()
    )


def test_the_tool_parser_is_shown_and_can_be_set(console):
    html = console.get("/admin/models/").content.decode()
    row = html[html.index('data-model="other"') :]
    assert "tools: llama3_json<" in row[:3000]  # detected from the llama template, no model loaded
    row = html[html.index('data-model="tiny"') :]
    assert "tools: hermes<" in row[:3000] and '<option value="">detected (hermes)</option>' in row
    response = post(console, ACTION, {"action": "settings", "model": "tiny", "tool_parser": "harmony"})
    assert response.status_code == 200 and get_pool().settings("tiny")["tool_parser"] == "harmony"
    row = response.content.decode()
    row = row[row.index('data-model="tiny"') :]
    assert "tools: harmony (set)<" in row and '<option value="harmony" selected>' in row
    post(console, ACTION, {"action": "settings", "model": "tiny", "tool_parser": ""})
    assert get_pool().settings("tiny")["tool_parser"] is None


def test_the_kv_format_is_set_with_what_it_costs(console):
    html = console.get("/admin/models/").content.decode()
    row = html[html.index('data-model="tiny"') :]
    assert "8-bit: 1.9x tokens/GB" in row[:6000] and 'name="kv_group_size"' in row[:6000]
    response = post(
        console, ACTION, {"action": "settings", "model": "tiny", "kv_bits": "4", "kv_group_size": "32"}
    )
    assert response.status_code == 200
    assert (get_pool().settings("tiny")["kv_bits"], get_pool().settings("tiny")["kv_group_size"]) == (4, 32)
    assert '<option value="4" selected>' in response.content.decode()
    post(console, ACTION, {"action": "settings", "model": "tiny", "kv_bits": "", "kv_group_size": ""})
    assert get_pool().settings("tiny")["kv_bits"] is None


def test_speculative_decoding_is_chosen_among_the_drafters(console):
    html = console.get("/admin/models/").content.decode()
    row = html[html.index('data-model="tiny"') :]
    assert all(f'<option value="{m}">{m}</option>' in row for m in ("off", "lookup", "suffix"))
    response = post(console, ACTION, {"action": "settings", "model": "tiny", "speculative": "suffix"})
    assert response.status_code == 200 and get_pool().settings("tiny")["speculative"] == "suffix"
    assert '<option value="suffix" selected>' in response.content.decode()
    post(console, ACTION, {"action": "settings", "model": "tiny", "speculative": ""})
    assert get_pool().settings("tiny")["speculative"] is None


@pytest.mark.parametrize(
    "form, message",
    [
        ({"action": "ttl", "ttl_seconds": "soon"}, "ttl_seconds: &#x27;soon&#x27; is not a number"),
        ({"action": "ttl", "ttl_seconds": "-5"}, "ttl_seconds: must be a number of seconds &gt; 0"),
        ({"action": "settings", "top_p": "5"}, "top_p"),
        ({"action": "settings", "top_k": "1.5"}, "top_k: &#x27;1.5&#x27; is not an integer"),
        ({"action": "settings", "chat_template_kwargs": "{nope"}, "chat_template_kwargs: not valid JSON"),
        ({"action": "settings", "model_type": "vision"}, "model_type: must be one of"),
        ({"action": "settings", "tool_parser": "glm5"}, "tool_parser: must be one of"),
        ({"action": "settings", "kv_bits": "3"}, "kv_bits=3: must be one of 4, 8"),
        ({"action": "settings", "kv_group_size": "48"}, "kv_group_size=48: must be one of 32, 64, 128"),
        ({"action": "settings", "speculative": "tree"}, "speculative: must be one of off, lookup, suffix"),
        ({"action": "alias", "alias": "tiny2"}, "is the id of another model"),
        ({"action": "fly"}, "unknown action"),
    ],
)
def test_bad_values_show_an_error_and_save_nothing(console, form, message):
    before = get_pool().settings("tiny")
    response = post(console, ACTION, dict(form, model="tiny"))
    assert response.status_code == 400
    html = response.content.decode()
    assert 'class="error" role="alert"' in html and message in html, html[:2000]
    assert get_pool().settings("tiny") == before


def test_unknown_model_not_loaded_and_would_not_fit(console):
    assert post(console, ACTION, {"action": "load", "model": "nope"}).status_code == 404
    response = post(console, ACTION, {"action": "unload", "model": "tiny2"})
    assert response.status_code == 409 and "tiny2 is not loaded" in response.content.decode()
    broken = post(console, ACTION, {"action": "load", "model": "broken"})
    if broken.status_code == 202:  # the refusal came after the page's short wait: the table shows it
        html = wait_until(
            lambda: (lambda t: t if "cannot be served" in t and "alert" in t else None)(
                console.get("/admin/models/table/").content.decode()
            )
        )
    else:
        assert broken.status_code == 400
        html = broken.content.decode()
    assert "The model &#x27;broken&#x27; cannot be served" in html

    get_pool().max_model_memory = 1 << 20  # 1 MiB: no model fits
    response = post(console, ACTION, {"action": "load", "model": "tiny2"})
    html = response.content.decode()
    if response.status_code == 202:
        html = wait_until(
            lambda: (lambda t: t if "model memory limit" in t else None)(
                console.get("/admin/models/table/").content.decode()
            )
        )
    else:
        assert response.status_code == 507
    assert "needs" in html and "model memory limit" in html and get_pool().loaded("tiny2") is None


def test_rescan_and_login(console, tmp_path):
    response = post(console, ACTION, {"action": "rescan"})
    assert (
        response.status_code == 200
        and "Rescanned the model directories: 4 folders" in response.content.decode()
    )
    with override_settings(OMLX_API_KEY="k"):
        assert Client().get("/admin/models/").status_code == 302
        assert Client().post(ACTION, {"action": "rescan"}, HTTP_HX_REQUEST="true").status_code == 401


def test_vision_models_carry_a_badge(console, tmp_path, model_dir):
    """A vision-language folder's row shows the `vision` badge (docs/vision.md); text rows do not."""
    import shutil

    shutil.copytree(model_dir("llava", "tiny"), tmp_path / "models" / "vlm")  # the pool rescans
    html = console.get("/admin/models/").content.decode()
    rows = {part.split('"', 1)[0]: part for part in html.split('data-model="')[1:]}
    assert ">vision</span>" in rows["vlm"].split("</td>", 2)[1]
    assert ">vision</span>" not in rows["tiny"]


def test_lora_adapters_say_their_base(console, tmp_path):
    """An adapter folder's row says which base model it runs over (docs/models.md)."""
    from inference.testkit.adapters import build_adapter

    build_adapter(tmp_path / "models" / "tiny-lora", tmp_path / "models" / "tiny", seed=1)  # rescanned
    html = console.get("/admin/models/").content.decode()
    rows = {part.split('"', 1)[0]: part for part in html.split('data-model="')[1:]}
    assert "LoRA adapter over tiny<" in rows["tiny-lora"]
    assert "LoRA adapter over" not in rows["tiny"]
