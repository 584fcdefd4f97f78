import pytest

from cache.sizes import parse_size, total_ram


@pytest.mark.parametrize(
    "value, expected",
    [
        (0, 0),
        (1234, 1234),
        ("1234", 1234),
        ("512MB", 512 * 10**6),
        ("4GiB", 4 * 2**30),
        ("1.5 GB", 1_500_000_000),
        ("64k", 65536),
        ("2G", 2 * 2**30),
    ],
)
def test_sizes(value, expected):
    assert parse_size(value) == expected


def test_percent_of_ram():
    assert parse_size("10%") == int(total_ram() * 0.1)
    assert parse_size("0%") == 0


@pytest.mark.parametrize("value", [-1, "lots", "10 parsecs", "150%", "-5%", 1.5, True, None])
def test_bad_sizes(value):
    with pytest.raises(ValueError, match="hot"):
        parse_size(value, "hot")
