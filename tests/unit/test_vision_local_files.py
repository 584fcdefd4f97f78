"""Server files as image sources (inference/vision/local_files.py): read only as regular files
inside the image_dir folders; every other path, and a missing file, gets the one REFUSED
message; reads stop at the byte cap."""

import os
from pathlib import Path

import pytest

from inference.vision import images
from inference.vision.limits import ImageLimits
from inference.vision.local_files import REFUSED, read_local


@pytest.fixture
def folders(tmp_path):
    """(allowed folder, a folder outside it), each with a picture; links and a FIFO inside."""
    inside, outside = tmp_path / "allowed", tmp_path / "secret"
    (inside / "sub").mkdir(parents=True)
    outside.mkdir()
    (inside / "sub" / "ok.png").write_bytes(b"inside")
    (outside / "key.png").write_bytes(b"outside")
    (inside / "out.png").symlink_to(outside / "key.png")
    (inside / "zero.png").symlink_to("/dev/zero")
    (inside / "in.png").symlink_to(inside / "sub" / "ok.png")
    (inside / "linked").symlink_to(outside)  # a folder link: O_NOFOLLOW checks only the last name
    os.mkfifo(inside / "pipe.png")
    return inside.resolve(), outside.resolve()


def _read(url, folder, **limits):
    return read_local(url, ImageLimits(image_dirs=(folder,), **limits), deadline=float("inf"))


def test_regular_files_inside_are_read(folders):
    inside, _ = folders
    assert _read(str(inside / "sub" / "ok.png"), inside) == b"inside"
    assert _read((inside / "sub" / "ok.png").as_uri(), inside) == b"inside"
    assert _read("file://localhost" + str(inside / "sub" / "ok.png"), inside) == b"inside"
    assert _read(str(inside / "in.png"), inside) == b"inside"  # a link that stays inside


@pytest.mark.parametrize(
    "name",
    [
        "secret/key.png",  # an existing file outside
        "secret/missing.png",  # a missing one outside
        "allowed/missing.png",  # a missing one inside
        "allowed/out.png",  # a symlink leading out
        "allowed/linked/key.png",  # through a symlinked folder leading out
        "allowed/zero.png",  # a symlink to a device
        "allowed/pipe.png",  # a FIFO (would block a plain open)
        "allowed/sub",  # a folder
        "allowed",  # the allowed folder itself
        "allowed/../secret/key.png",  # .. out of the folder
        "/dev/zero",  # a device outside
        "/etc/passwd",
        "file://otherhost/etc/passwd",  # another machine's file
    ],
)
def test_every_refusal_is_the_same_message(folders, name):
    inside, _ = folders
    url = name if name.startswith(("/", "file:")) else str(inside.parent / name)
    with pytest.raises(ValueError) as info:
        _read(url, inside)
    assert str(info.value) == REFUSED


def test_no_folder_no_file(folders):
    inside, _ = folders
    with pytest.raises(ValueError) as info:
        read_local(str(inside / "sub" / "ok.png"), ImageLimits(), deadline=float("inf"))
    assert str(info.value) == REFUSED


def test_a_device_inside_an_allowed_folder_is_refused():
    """/dev allowed (a mistake): /dev/zero is still no regular file, and is never read."""
    with pytest.raises(ValueError) as info:
        _read("/dev/zero", Path("/dev"))
    assert str(info.value) == REFUSED


def test_reads_stop_at_the_byte_cap_and_the_deadline(tmp_path):
    big = tmp_path / "big.png"
    with open(big, "wb") as f:
        f.truncate(1 << 20)  # sparse: 1 MiB of zeros
    assert len(_read(str(big), tmp_path.resolve(), max_bytes=1 << 20)) == 1 << 20
    with pytest.raises(ValueError, match="larger than 65536 bytes"):
        _read(str(big), tmp_path.resolve(), max_bytes=65536)
    with pytest.raises(ValueError, match="not read within"):
        read_local(str(big), ImageLimits(image_dirs=(tmp_path.resolve(),)), deadline=0.0)


def test_load_image_gives_the_same_refusal(folders):
    inside, outside = folders
    limits = ImageLimits(image_dirs=(inside,))
    for url in (str(outside / "key.png"), str(outside / "missing.png")):
        with pytest.raises(ValueError) as info:
            images.load_image(url, limits)
        assert str(info.value) == REFUSED
