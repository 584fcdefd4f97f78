"""The rows of the settings table about the KV prefix cache: the RAM tier, quantized KV and the
SSD tier (docs/cache.md). Placed in the table (omlx_site/setting_table.py) where ``*KV_CACHE``
stands."""

from __future__ import annotations

from omlx_site import setting_checks as checks
from omlx_site.setting_kinds import BYTES, FOLDER_OR_OFF, INTEGER, INTEGER_OR_OFF, NUMBER, SIZE
from omlx_site.setting_row import BOTH, Setting

KV_CACHE: tuple[Setting, ...] = (
    Setting(
        "hot_cache_max_size",
        "OMLX_HOT_CACHE_MAX_SIZE",
        SIZE,
        "10%",
        "RAM for cached KV blocks, per model: bytes, 4GiB, 512MB or a percentage of RAM",
        flag="--hot-cache-max-size",
        commands=BOTH,
        check=checks.engine("hot_cache_max_size"),
        applies="next load",
    ),
    Setting(
        "kv_bits",
        "OMLX_KV_BITS",
        INTEGER_OR_OFF,
        None,
        "quantize the KV cache of attention layers (full and sliding-window) to 8 or 4 bits, per "
        "model (in the running batch, the RAM tier and the SSD tier): about 1.9x or 3.6x the "
        "tokens per GB of float16 KV; on SmolLM2-135M 8 bits cost +0.24% perplexity, 4 bits "
        "+10.9% (docs/benchmarks.md); blocks of one KV format never serve another; recurrent "
        "states keep their dtype; 'off': KV in the model's dtype",
        flag="--kv-bits",
        commands=BOTH,
        check=checks.engine("kv_bits"),
        shown_default="off",
        applies="next load",
    ),
    Setting(
        "kv_group_size",
        "OMLX_KV_GROUP_SIZE",
        INTEGER,
        64,
        "channels per scale and bias of quantized KV (--kv-bits): 32, 64 or 128, a divisor of the "
        "model's head dimension; smaller groups: closer to float, more bytes",
        flag="--kv-group-size",
        commands=BOTH,
        check=checks.engine("kv_group_size"),
        applies="next load",
    ),
    Setting(
        "paged_ssd_cache_dir",
        "OMLX_COLD_CACHE_DIR",
        FOLDER_OR_OFF,
        lambda home: home / "cache",
        "folder of the SSD tier of the KV cache, kept across restarts; 'off' keeps blocks in RAM only",
        flag="--paged-ssd-cache-dir",
        commands=BOTH,
        shown_default="$OMLX_HOME/cache",
    ),
    Setting(
        "paged_ssd_cache_bits",
        "OMLX_PAGED_SSD_CACHE_BITS",
        INTEGER_OR_OFF,
        None,
        "keep a float model's SSD tier quantized to 8 or 4 bits (groups of --kv-group-size), "
        "dequantized when read back: 3.5x or 6x fewer bytes per float32 token on disk, restored KV "
        "close to the computed one, not equal; models with --kv-bits store their quantized KV as it "
        "is; 'off': the SSD tier holds the KV as computed",
        flag="--paged-ssd-cache-bits",
        commands=BOTH,
        check=checks.engine("paged_ssd_cache_bits"),
        shown_default="off",
        applies="next load",
    ),
    Setting(
        "paged_ssd_cache_max_size",
        "OMLX_COLD_CACHE_MAX_BYTES",
        BYTES,
        None,
        "cap on the SSD tier, all models together, e.g. 50GB (unset: no cap)",
        flag="--paged-ssd-cache-max-size",
        commands=BOTH,
        applies="now",
    ),
    Setting(
        "paged_ssd_cache_ttl",
        "OMLX_COLD_CACHE_TTL_SECONDS",
        NUMBER,
        None,
        "remove SSD blocks nobody used for this many seconds (unset: never)",
        flag="--paged-ssd-cache-ttl",
        commands=BOTH,
        check=checks.positive,
        metavar="SECONDS",
        applies="now",
    ),
)
