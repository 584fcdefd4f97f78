"""The Models page's Import of other apps' GGUF models, in process: the origin of every row, the
Import button of Ollama's and LM Studio's GGUF models, and the import job's refusals (a blob that
does not match its digest, a model that is no GGUF, no importer in this build)."""

import importlib.util

import pytest
from django.test import override_settings

from inference.pool import close_pool, get_pool
from tests.support.admin_console import console, post, wait_until  # noqa: F401  (console: a fixture)
from tests.support.other_apps_trees import (
    LMSTUDIO_MLX,
    OLLAMA_LIBRARY,
    OLLAMA_NAMESPACED,
    build_lmstudio,
    build_ollama,
)

pytestmark = pytest.mark.django_db(transaction=True)
ACTION = "/admin/models/action/"


@pytest.fixture
def apps_console(console, tmp_path, model_dir):
    lmstudio = build_lmstudio(tmp_path / "lmstudio", model_dir("qwen2", "tiny"))
    ollama = build_ollama(tmp_path / "ollama", tmp_path)
    close_pool()
    with override_settings(OMLX_LMSTUDIO_MODELS=lmstudio, OMLX_OLLAMA_MODELS=ollama):
        yield console
        close_pool()


def _import(client, model_id):
    """(status, the table with the import's outcome): the answer's when the job ended at once, else
    the table's once the job is over (a job's message is shown once)."""
    from admin_panel.model_jobs import jobs

    response = post(client, ACTION, {"action": "import", "model": model_id})
    if response.status_code != 202:
        return response.status_code, response.content.decode()
    wait_until(lambda: jobs.running(model_id) is None)
    return 202, client.get("/admin/models/table/").content.decode()


def test_rows_say_where_they_came_from_and_gguf_rows_offer_import(apps_console):
    html = apps_console.get("/admin/models/").content.decode()
    for origin in ("model dir", "LM Studio", "Ollama"):
        assert f'<span class="badge origin" title="where this model came from">{origin}</span>' in html
    assert html.count(">Import</button>") == 4  # 3 Ollama names, 1 LM Studio GGUF file
    refused = post(apps_console, ACTION, {"action": "import", "model": LMSTUDIO_MLX})
    assert refused.status_code == 400 and "nothing to import" in refused.content.decode()


def test_a_changed_blob_is_refused(apps_console):
    blob = get_pool().folders()[OLLAMA_NAMESPACED].gguf
    blob.write_bytes(blob.read_bytes()[:-1] + b"\x01")
    status, html = _import(apps_console, OLLAMA_NAMESPACED)
    assert status in (202, 400) and "does not match its sha256 digest" in html
    assert not any(p.name.startswith("tinychat") for p in get_pool().model_dir.rglob("*"))


def _has_importer() -> bool:
    try:
        return importlib.util.find_spec("inference.gguf.importer") is not None
    except ImportError:  # no inference.gguf at all
        return False


@pytest.mark.skipif(_has_importer(), reason="the GGUF importer is here (its own tests import GGUF files)")
def test_without_the_importer_the_import_says_so(apps_console):
    status, html = _import(apps_console, OLLAMA_LIBRARY)
    assert status in (202, 503) and "GGUF import is not available in this build" in html
    assert OLLAMA_LIBRARY in get_pool().folders()  # still listed, to import


def test_a_gguf_file_in_the_model_dir_is_imported_from_the_models_page(console, model_dir):
    """A loose FILE.gguf in the model directory gets the Import button too; the folder FILE it
    becomes is served under the file's id (the file's row then says it is shadowed)."""
    from inference.testkit.gguf_file import write_gguf

    models = get_pool().model_dir
    write_gguf(model_dir("qwen2", "tiny"), models / "loose.gguf", "Q8_0")
    get_pool().rescan()
    html = console.get("/admin/models/").content.decode()
    assert html.count(">Import</button>") == 1 and "loose" in html
    status, html = _import(console, "loose")
    assert status in (200, 202) and "cannot be served: shadowed by" in html, html
    folder = get_pool().folders()["loose"]
    assert folder.path == models / "loose" and folder.servable and folder.gguf is None
