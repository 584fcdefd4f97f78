import subprocess
import sys

import pytest

from cache.block_key import KEY_BYTES, ModelFingerprint, block_key, digest_files, salted_root

FP = ModelFingerprint("w" * 64, "t" * 64, "float32", "kv:2x2x16", 4)


def test_keys_chain_and_differ():
    root = FP.root_key()
    assert len(root) == KEY_BYTES
    a = block_key(root, [1, 2, 3, 4])
    assert a == block_key(root, [1, 2, 3, 4])
    assert a != block_key(root, [1, 2, 3, 5])
    assert block_key(a, [5, 6]) != block_key(root, [5, 6])  # the parent is part of the key
    assert block_key(root, [1, 2]) != block_key(root, [1, 2, 0])  # length is part of the key
    assert block_key(root, [256]) != block_key(root, [1, 0])  # fixed-width token encoding
    assert block_key(root, [1], extra=b"x") != block_key(root, [1])


def test_every_fingerprint_field_changes_the_root():
    base = FP.root_key()
    for change in [
        dict(weights="x"),
        dict(tokenizer="x"),
        dict(dtype="bfloat16"),
        dict(kv_layout="kv:2x2x32"),
        dict(block_size=8),
        dict(format_version=99),
    ]:
        fields = {**FP.__dict__, **change}
        assert ModelFingerprint(**fields).root_key() != base


def test_keys_are_the_same_in_another_process():
    code = (
        "from cache.block_key import ModelFingerprint, block_key;"
        "fp = ModelFingerprint('w' * 64, 't' * 64, 'float32', 'kv:2x2x16', 4);"
        "print(block_key(block_key(fp.root_key(), [1, 2, 3, 4]), [9]).hex())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == block_key(block_key(FP.root_key(), [1, 2, 3, 4]), [9]).hex()


def test_bad_parent_is_rejected():
    with pytest.raises(ValueError):
        block_key(b"short", [1])


def test_sampled_digest_tells_same_shaped_files_apart(tmp_path):
    size = 8 << 20
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    a.write_bytes(bytes(size))
    same = tmp_path / "copy" / "a.safetensors"
    same.parent.mkdir()
    same.write_bytes(bytes(size))
    assert digest_files([a], sample=True) == digest_files([same], sample=True)
    # Random weights of another seed differ everywhere; one differing sampled byte is enough.
    data = bytearray(size)
    data[0] = 1
    b.write_bytes(bytes(data))
    assert digest_files([a], sample=True) != digest_files([b], sample=True)
    assert digest_files([a], sample=False) != digest_files([b], sample=False)


def test_a_salt_seeds_its_own_chain_and_no_salt_keeps_todays_keys():
    root = FP.root_key()
    assert salted_root(root, None) == root  # existing caches stay valid
    a, b = salted_root(root, "tenant-a"), salted_root(root, "tenant-b")
    assert len(a) == KEY_BYTES and len({root, a, b, salted_root(root, "")}) == 4
    assert a == salted_root(root, "tenant-a")  # the same in every process and after a restart
    assert salted_root(root, "\ud800") != root  # any str hashes, even one that is not valid text
    # The salt enters the first block's key, and through the chain every later one.
    first = [block_key(r, [1, 2, 3, 4]) for r in (root, a, b)]
    assert len(set(first)) == 3
    assert len({block_key(k, [5, 6]) for k in first}) == 3
