"""Other apps' models (inference/pool/other_apps.py): LM Studio's and Ollama's folders as those
apps write them (tests/support/other_apps_trees.py) are listed with their origin and names, off
means not searched, and hostile Ollama manifests are skipped with a logged reason."""

import json
import logging
import os

import pytest

from inference.pool import app_import
from inference.pool.discovery import discover, signature
from inference.pool.other_apps import (
    IMPORT_REASON,
    MAX_MANIFEST_BYTES,
    OtherApps,
    find_ollama,
    ollama_manifest,
)
from tests.support.other_apps_trees import (
    LMSTUDIO_GGUF,
    LMSTUDIO_MLX,
    OLLAMA_LIBRARY,
    OLLAMA_NAMESPACED,
    OLLAMA_OTHER_REGISTRY,
    add_blob,
    build_lmstudio,
    build_ollama,
    model_layers,
    write_gguf,
    write_manifest,
)


@pytest.fixture(scope="module")
def trees(tmp_path_factory, model_dir):
    base = tmp_path_factory.mktemp("other-apps")
    lmstudio = build_lmstudio(base / "lmstudio", model_dir("qwen2", "tiny"))
    ollama = build_ollama(base / "ollama", base)
    return OtherApps(lmstudio, ollama)


def test_listed_with_origin_and_names(trees, tmp_path):
    folders = discover([tmp_path / "no-models"], apps=trees)
    mlx = folders[LMSTUDIO_MLX]
    assert mlx.servable, mlx.reason
    assert (mlx.origin, mlx.path, mlx.gguf) == ("LM Studio", trees.lmstudio / LMSTUDIO_MLX, None)
    gguf = folders[LMSTUDIO_GGUF]
    assert not gguf.servable and gguf.reason == IMPORT_REASON and gguf.gguf == trees.lmstudio / LMSTUDIO_GGUF
    assert not any("mmproj" in i for i in folders)  # a vision projector is not a model
    ollama = {i: f for i, f in folders.items() if f.origin == "Ollama"}
    assert set(ollama) == {OLLAMA_LIBRARY, OLLAMA_NAMESPACED, OLLAMA_OTHER_REGISTRY}
    blob = ollama[OLLAMA_LIBRARY].gguf
    assert blob.parent == trees.ollama / "blobs" and blob.read_bytes()[:4] == b"GGUF"
    assert ollama[OLLAMA_LIBRARY].size_bytes == blob.stat().st_size
    assert all(f.reason == IMPORT_REASON and f.kind == "llm" for f in ollama.values())


def test_a_new_manifest_or_folder_changes_the_signature(tmp_path, model_dir):
    apps = OtherApps(tmp_path / "lmstudio", build_ollama(tmp_path / "ollama", tmp_path))
    before = signature([], apps=apps)
    write_manifest(
        apps.ollama, "another:7b", model_layers(apps.ollama, write_gguf(tmp_path / "a.gguf").read_bytes())
    )
    after = signature([], apps=apps)
    assert after != before
    build_lmstudio(apps.lmstudio, model_dir("qwen2", "tiny"))
    assert signature([], apps=apps) != after


def test_off_means_not_searched_and_auto_finds_the_standard_folders(trees, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    for app, root in ((".lmstudio", trees.lmstudio), (".ollama", trees.ollama)):
        (tmp_path / app).mkdir()
        os.symlink(root, tmp_path / app / "models")
    auto = OtherApps.from_settings("auto", "auto")
    assert auto == OtherApps(tmp_path / ".lmstudio/models", tmp_path / ".ollama/models")
    assert {f.origin for f in discover([tmp_path / "none"], apps=auto).values()} == {"LM Studio", "Ollama"}
    off = OtherApps.from_settings(None, None)  # the settings' "off"
    assert off == OtherApps(None, None)
    assert discover([tmp_path / "none"], apps=off) == {}
    # $OLLAMA_MODELS moves Ollama's folder, as it does for Ollama
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "elsewhere"))
    assert OtherApps.from_settings(None, "auto").ollama is None  # set, but no such folder


HOSTILE = [  # (manifest name, what is planted in its layers or in its file, the reason logged)
    ("traversal:1b", "layers", lambda root, x: _digest(x, "sha256:../../../../etc/passwd"), "is not sha256:"),
    ("upper:1b", "layers", lambda root, x: _digest(x, x[0]["digest"].upper()), "is not sha256:"),
    ("missing:1b", "layers", lambda root, x: _digest(x, "sha256:" + "0" * 64), "is missing"),
    (
        "notgguf:1b",
        "layers",
        lambda root, x: x[0].update(digest=add_blob(root, b"#!/bin/sh\n"), size=10),
        "not a GGUF",
    ),
    ("size:1b", "layers", lambda root, x: x[0].update(size=1), "the manifest says 1"),
    ("blobout:1b", "layers", lambda root, x: _blob_out(root, x), "a link out of"),
    ("notjson:1b", "file", lambda root, f: f.write_bytes(b"\x00GGUF not json {"), "not JSON"),
    ("huge:1b", "file", lambda root, f: f.write_bytes(b" " * (MAX_MANIFEST_BYTES + 1)), "larger than"),
    ("list:1b", "file", lambda root, f: f.write_text("[1, 2]"), "not a manifest"),
    ("link:1b", "file", lambda root, f: _link(f, root.parent / "outside.json"), "cannot be opened"),
    ("fifo:1b", "file", lambda root, f: (f.unlink(), os.mkfifo(f)), "not a regular file"),
    ("odd name:1b", "file", lambda root, f: None, "is not a model name part"),
]


@pytest.mark.parametrize("name, where, planted, reason", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_manifest_is_skipped_with_a_logged_reason(tmp_path, caplog, name, where, planted, reason):
    root = tmp_path / "ollama"
    gguf = write_gguf(tmp_path / "ok.gguf").read_bytes()
    write_manifest(root, "good:1b", model_layers(root, gguf))
    layers = model_layers(root, gguf)
    if where == "layers":
        planted(root, layers)
    manifest = write_manifest(root, name, layers)
    if where == "file":
        planted(root, manifest)
    with caplog.at_level(logging.WARNING, logger="omlx.models"):
        folders = discover([tmp_path / "none"], apps=OtherApps(None, root))
    assert set(folders) == {"good:1b"}
    assert any(reason in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_import_names_and_refuses_a_changed_blob(trees, tmp_path):
    folders = discover([tmp_path / "none"], apps=trees)
    models = tmp_path / "models"
    assert app_import.destination(folders[OLLAMA_LIBRARY], models) == models / "tinychat-1b"
    assert app_import.destination(folders[OLLAMA_OTHER_REGISTRY], models) == models / "org/tinychat-gguf-Q8_0"
    assert app_import.destination(folders[LMSTUDIO_GGUF], models) == models / "bartowski/Tiny-Chat-Q4_K_M"
    with pytest.raises(ValueError, match="nothing to import"):
        app_import.import_model(folders[LMSTUDIO_MLX], models)
    # A blob whose bytes no longer hash to its name is refused before anything is converted.
    root = tmp_path / "ollama"
    layers = model_layers(root, write_gguf(tmp_path / "t.gguf").read_bytes())
    write_manifest(root, "changed:1b", layers)
    blob = root / "blobs" / layers[0]["digest"].replace(":", "-")
    data = bytearray(blob.read_bytes())
    data[-1] ^= 1
    blob.write_bytes(bytes(data))
    folder = discover([tmp_path / "none"], apps=OtherApps(None, root))["changed:1b"]
    with pytest.raises(ValueError, match="does not match its sha256"):
        app_import.import_model(folder, models)
    assert not (models / "changed-1b").exists()


def _digest(layers, digest):
    layers[0]["digest"] = digest


def _link(manifest, outside):
    outside.write_text(json.dumps({"layers": []}))
    manifest.unlink()
    os.symlink(outside, manifest)


def _blob_out(root, layers):
    outside = root.parent / "elsewhere.gguf"
    write_gguf(outside)
    hexdigest = "f" * 64
    os.symlink(outside, root / "blobs" / f"sha256-{hexdigest}")
    layers[0].update(digest=f"sha256:{hexdigest}", size=outside.stat().st_size)


def test_an_ollama_blob_is_imported_and_serves_what_its_source_model_serves(tmp_path, model_dir):
    """The Import action end to end (inference.pool.app_import with the GGUF importer): an Ollama
    blob written from a tiny model is checked against its digest, converted into the first model
    directory, found by discovery as a servable model, and its greedy tokens equal the source's."""
    from inference.engine.llm import LLM
    from inference.engine.sampling_params import SamplingParams
    from inference.testkit.gguf_file import write_gguf as write_real_gguf

    source = model_dir("qwen2", "tiny")
    root = tmp_path / "ollama"
    blob = write_real_gguf(source, tmp_path / "tiny.gguf").read_bytes()
    write_manifest(root, "tinyqwen:1b", model_layers(root, blob))
    folder = discover([tmp_path / "none"], apps=OtherApps(None, root))["tinyqwen:1b"]
    models = tmp_path / "models"
    imported = app_import.import_model(folder, models)
    assert imported == models / "tinyqwen-1b"
    served = discover([models])["tinyqwen-1b"]
    assert served.servable, served.reason

    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    prompt = [5, 17, 42, 99, 7]
    with LLM(source) as llm:
        want = llm.generate(prompt, params)[0].token_ids
    with LLM(imported) as llm:
        assert llm.generate(prompt, params)[0].token_ids == want


def test_an_ollama_name_finds_its_manifest_and_nothing_outside(trees, tmp_path):
    """`omlx import NAME:TAG` (find_ollama): the names `ollama run` takes, no tag meaning latest;
    a name whose parts are not plain names never becomes a path."""
    root = trees.ollama
    for name, model_id in [
        (OLLAMA_LIBRARY, OLLAMA_LIBRARY),
        (OLLAMA_NAMESPACED.removesuffix(":latest"), OLLAMA_NAMESPACED),
        (OLLAMA_OTHER_REGISTRY, OLLAMA_OTHER_REGISTRY),
    ]:
        found = find_ollama(root, name)
        assert found.id == model_id and found.path.parent == root / "blobs"
        folder = app_import.ollama_folder(found.id)
        assert tmp_path / folder == app_import.destination(found, tmp_path)  # the Models page's Import's
    assert (
        ollama_manifest(root, "llama3.2")[1] == root / "manifests/registry.ollama.ai/library/llama3.2/latest"
    )
    with pytest.raises(ValueError, match="no Ollama model tinychat:2b"):
        find_ollama(root, "tinychat:2b")
    for bad in ("../../etc:passwd", "a/b/c/d:1", "a//b:1", ":1", "tinychat:../1b", "/abs:1"):
        with pytest.raises(ValueError):
            ollama_manifest(root, bad)


def test_omlx_import_takes_an_ollama_name(tmp_path, model_dir, monkeypatch, capsys):
    """`omlx import NAME:TAG` (omlx_site/commands/gguf_import.py, run in process): Ollama's folder
    from $OMLX_OLLAMA_MODELS as `omlx serve` finds it, the blob checked against its sha256, the
    folder NAME-TAG servable; a name Ollama lacks and a changed blob exit 2 with the reason."""
    from argparse import Namespace

    from inference.testkit.gguf_file import write_gguf as write_real_gguf
    from omlx_site.commands import gguf_import

    root, models = tmp_path / "ollama", tmp_path / "models"
    blob = write_real_gguf(model_dir("qwen2", "tiny"), tmp_path / "tiny.gguf").read_bytes()
    write_manifest(root, "tinyqwen:1b", model_layers(root, blob))
    monkeypatch.setenv("OMLX_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OMLX_OLLAMA_MODELS", str(root))

    def run(source, **flags):
        args = dict(file=source, name=None, quantize=None, model_dir=str(models), ollama_models=None)
        return gguf_import.run(Namespace(**dict(args, **flags)))

    assert run("tinyqwen:1b") == 0
    assert "tinyqwen:1b: Ollama blob" in capsys.readouterr().out
    assert discover([models])["tinyqwen-1b"].servable
    assert run("tinyqwen", ollama_models=str(root)) == 2
    assert f"no Ollama model tinyqwen:latest in {root}" in capsys.readouterr().err
    stored = next(p for p in (root / "blobs").iterdir() if p.read_bytes() == blob)
    stored.write_bytes(blob[:-1] + bytes([blob[-1] ^ 1]))  # same size, other bytes
    assert run("tinyqwen:1b", name="again") == 2
    assert "does not match its sha256 digest" in capsys.readouterr().err
    assert not (models / "again").exists()
    monkeypatch.setenv("OMLX_OLLAMA_MODELS", "off")
    assert run("tinyqwen:1b", name="other") == 2
    assert "no such file, and no Ollama models folder" in capsys.readouterr().err
