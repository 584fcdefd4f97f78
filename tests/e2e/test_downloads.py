"""The Downloads page in Chromium against a live `omlx serve` whose hub is the local stand-in
(tests/support/hub_server.py, through HF_ENDPOINT): a bad id is refused; a missing repo fails with the
hub's reason; a download shows its progress (pushed over the websocket), is cancelled while the
hub stalls, leaves nothing that discovery sees, resumes where it stopped and completes, and the
model then shows in the Models list."""

import json
import random
import shutil
import urllib.request

import pytest
from playwright.sync_api import expect

from inference.hub import partial_path, staging_path
from tests.support.server import ServerProcess
from tests.e2e.conftest import API_KEY
from tests.support.hub_server import HubServer

REPO = "test-org/tiny-chat"
COMMIT = "c" * 40
CHUNK = 10 * 1024 * 1024  # huggingface_hub's download chunk: what a cancelled download keeps
BIG = "weights-extra.safetensors"  # last in the pull's order
DOWNLOAD_TIMEOUT = 180_000  # ms


@pytest.fixture(scope="module")
def hub(model_dir):
    server = HubServer()
    repo = server.add_repo(REPO, model_dir("qwen2", "tiny"), commit=COMMIT)
    repo.files[BIG] = random.Random(1).randbytes(2 * CHUNK + 4321)
    server.stall_after[BIG] = CHUNK + 1000  # the first download of it stops there until released
    yield server
    server.close()


@pytest.fixture(scope="module")
def admin_server(tmp_path_factory, hub, model_dir):
    models = tmp_path_factory.mktemp("download-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_ENDPOINT", hub.url)
        mp.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf-home")))  # no token of the machine's user
        # The stalled read must outlast the time to see the progress and click Cancel on a loaded
        # machine: huggingface_hub's 10 s read timeout would retry it (the hub stalls only once)
        # and the download would complete before the Cancel.
        mp.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "300")
        for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE"):
            mp.delenv(name, raising=False)
        server = ServerProcess(
            ["--model-dir", str(models), "--api-key", API_KEY], tmp_path_factory.mktemp("download-home")
        )
    server.api_key = API_KEY
    server.models = models
    yield server
    server.stop()


def _api_models(server) -> list:
    request = urllib.request.Request(
        server.url + "/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return [m["id"] for m in json.load(response)["data"]]


def _download(page, repo, revision=""):
    page.get_by_label("model id (ORG/NAME)").fill(repo)
    page.get_by_label("revision").fill(revision)
    page.get_by_role("button", name="Download", exact=True).click()


def test_bad_ids_and_missing_repos_are_refused(page, admin_server):
    page.goto(admin_server.url + "/admin/downloads/")
    _download(page, "not a repo")
    expect(page.locator("#downloads-list [role=alert]")).to_contain_text("is not a Hugging Face model id")
    _download(page, "test-org/missing")
    row = page.locator('#downloads tr[data-repo="test-org/missing"]')
    expect(row.locator(".state .badge")).to_have_text("failed", timeout=DOWNLOAD_TIMEOUT)
    expect(row.locator(".message")).to_contain_text("repository test-org/missing not found")
    _download(page, REPO, "no-such-branch")
    row = page.locator(f'#downloads tr[data-repo="{REPO}"]')
    expect(row.locator(".state .badge")).to_have_text("failed", timeout=DOWNLOAD_TIMEOUT)
    expect(row.locator(".message")).to_contain_text("revision 'no-such-branch' does not exist")
    row.get_by_role("button", name="Remove from the list").click()
    expect(row).to_have_count(0)


def test_progress_cancel_resume_and_the_model_is_listed(page, admin_server, hub, shot):
    models = admin_server.models
    page.goto(admin_server.url + "/admin/downloads/")
    _download(page, REPO)
    row = page.locator(f'#downloads tr[data-repo="{REPO}"]')
    # Progress arrives over the websocket while the hub holds the big file after its first chunk.
    page.wait_for_function(
        f"() => {{ const c = document.querySelector('#downloads tr[data-repo=\"{REPO}\"] .progress');"
        f" return c && Number(c.dataset.done) >= {CHUNK}; }}",
        timeout=DOWNLOAD_TIMEOUT,
    )
    expect(row.locator(".state .badge")).to_have_text("running")
    expect(row.locator(".file")).to_contain_text(BIG)
    shot(page, "downloads-progress")

    row.get_by_role("button", name="Cancel").click()
    # "cancelled" shows once the pull's process has ended: the transfer stopped inside the stall.
    expect(row.locator(".state .badge")).to_have_text("cancelled", timeout=60_000)
    hub.release.set()  # let the stalled response end
    staging = staging_path(models, REPO)
    partial = partial_path(staging, BIG)
    assert partial.is_file() and partial.stat().st_size >= CHUNK  # what arrived is kept
    assert len(hub.sent_for(BIG)) == 1  # one GET, the stalled one: no retry finished the file
    assert not (models / REPO).exists()  # nothing half-written where discovery looks
    assert REPO not in _api_models(admin_server)
    page.goto(admin_server.url + "/admin/models/")
    expect(page.locator('tr[data-model="tiny"]')).to_be_visible()
    expect(page.locator(f'tr[data-model="{REPO}"]')).to_have_count(0)
    shot(page, "downloads-models-after-cancel")

    page.goto(admin_server.url + "/admin/downloads/")
    row = page.locator(f'#downloads tr[data-repo="{REPO}"]')
    kept = partial.stat().st_size
    row.get_by_role("button", name="Resume").click()
    expect(row.locator(".state .badge")).to_have_text("done", timeout=DOWNLOAD_TIMEOUT)
    expect(row.locator(".resumed")).to_contain_text("resumed at")
    expect(row.locator(".percent")).to_have_text("(100%)")
    shot(page, "downloads-done")
    # The big file's one request after the Cancel asked for the bytes after the ones kept, and
    # got only those: resumed, not restarted.
    rest = len(hub.repos[REPO].files[BIG]) - kept
    assert [(s.range, s.body_bytes) for s in hub.sent_for(BIG)[1:]] == [(f"bytes={kept}-", rest)]
    for name, data in hub.repos[REPO].files.items():
        assert (models / REPO / name).read_bytes() == data, name
    assert not staging.exists()
    assert REPO in _api_models(admin_server)
    page.goto(admin_server.url + "/admin/models/")
    expect(page.locator(f'tr[data-model="{REPO}"]')).to_be_visible()


def test_a_download_left_by_a_stopped_server_is_listed_for_resume(page, admin_server, hub):
    """A staging folder no download of this server owns (a server stopped mid-pull) is listed
    as interrupted with Resume."""
    staging = staging_path(admin_server.models, "test-org/left-over")
    staging.mkdir(parents=True)
    (staging / ".omlx-pull.json").write_text(json.dumps({"repo": "test-org/left-over", "commit": COMMIT}))
    (staging / "config.json.incomplete").write_bytes(b"{")
    page.goto(admin_server.url + "/admin/downloads/")
    row = page.locator('#downloads tr[data-repo="test-org/left-over"]')
    expect(row.locator(".state .badge")).to_have_text("interrupted")
    expect(row.get_by_role("button", name="Resume")).to_be_visible()
    shutil.rmtree(staging.parent.parent)
