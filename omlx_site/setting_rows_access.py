"""The rows of the settings table about who gets in and what a request may make the server read:
keys and the browser boundary, Redis trust, image sources (docs/security.md). Placed in the
table (omlx_site/setting_table.py) where ``*ACCESS`` and ``*IMAGES`` stand."""

from __future__ import annotations

from omlx_site import setting_checks as checks
from omlx_site.setting_kinds import BOOLEAN, BYTES, FOLDERS, INTEGER, NUMBER, TEXT
from omlx_site.setting_row import BOTH, Setting

ACCESS: tuple[Setting, ...] = (
    Setting(
        "api_key",
        "OMLX_API_KEY",
        TEXT,
        None,
        "require a key (Authorization: Bearer KEY or x-api-key) on every /v1 route and /metrics; this "
        "one has every scope and logs in to the console (more keys, with scopes: `omlx keys`, docs/keys.md)",
        flag="--api-key",
        metavar="KEY",
        secret=True,
        applies="now",
    ),
    Setting(
        "allowed_hosts",
        "OMLX_ALLOWED_HOSTS",
        TEXT,
        None,
        "more Host names the server answers (comma-separated; any port), besides localhost, 127.0.0.1, "
        "[::1] and --host: with --host 0.0.0.0, the names and addresses other machines reach it by; "
        ".example.com: that name and its subdomains; other Hosts get a 400 (DNS rebinding)",
        flag="--allowed-hosts",
        check=checks.host_names,
        metavar="NAMES",
        console_editable=False,
    ),
    Setting(
        "cors_origins",
        "OMLX_CORS_ORIGINS",
        TEXT,
        None,
        "web origins (scheme://host[:port], comma-separated; *: any) whose pages may call the API "
        "from a browser, with CORS answers; the console stays same-origin only, and other origins' "
        "POST, PUT, PATCH and DELETE requests get a 403",
        flag="--cors-origins",
        check=checks.origins,
        metavar="ORIGINS",
        console_editable=False,
    ),
    Setting(
        "no_auth_on_network",
        "OMLX_NO_AUTH_ON_NETWORK",
        BOOLEAN,
        False,
        "serve a --host that is not loopback without an API key (without it, `omlx serve` refuses to)",
        flag="--no-auth-on-network",
        console_editable=False,
    ),
    Setting(
        "redis_url",
        "OMLX_REDIS_URL",
        TEXT,
        None,
        "Redis for the queue and the channel layer, e.g. redis://127.0.0.1:6379/0 (unset: SQLite "
        "queue, in-process channel layer)",
        flag="--redis-url",
        commands=BOTH,
        check=checks.redis_url,
        metavar="URL",
        console_editable=False,
    ),
    Setting(
        "redis_secret",
        "OMLX_REDIS_SECRET",
        TEXT,
        None,
        "Redis mode: the secret that signs every job and event (HMAC-SHA256); required with "
        "--redis-url, the same for the server and all its workers (docs/security.md)",
        flag="--redis-secret",
        commands=BOTH,
        check=checks.redis_secret,
        metavar="SECRET",
        secret=True,
        console_editable=False,
    ),
    Setting(
        "redis_trusted_network",
        "OMLX_REDIS_TRUSTED_NETWORK",
        BOOLEAN,
        False,
        "accept a --redis-url without a password on a non-loopback host (only trusted machines reach it)",
        flag="--redis-trusted-network",
        commands=BOTH,
        console_editable=False,
    ),
    Setting(
        "route_policy",
        "OMLX_ROUTE_POLICY",
        TEXT,
        "prefix",
        "Redis mode: which worker runs a request: 'prefix' (the one holding the longest prefix of it, "
        "weighed against load), 'least-loaded' or 'random' (docs/operations.md)",
        flag="--route-policy",
        check=checks.one_of("prefix", "least-loaded", "random"),
        console_editable=False,
    ),
    Setting(
        "route_decode_weight",
        "OMLX_ROUTE_DECODE_WEIGHT",
        NUMBER,
        1.0,
        "Redis mode: the work of one token to generate, in prompt tokens to compute, when the router "
        "weighs a worker's queue against the prefix it holds, for a worker that has not measured it "
        "yet (docs/operations.md)",
        check=checks.at_least(0),
        console_editable=False,
    ),
)

IMAGES: tuple[Setting, ...] = (
    Setting(
        "allow_remote_images",
        "OMLX_ALLOW_REMOTE_IMAGES",
        BOOLEAN,
        False,
        "fetch http(s) image URLs of chat requests for vision models, from public addresses only (off: "
        "such a request gets a 400)",
        flag="--allow-remote-images",
        commands=BOTH,
        console_editable=False,
    ),
    Setting(
        "image_dir",
        "OMLX_IMAGE_DIR",
        FOLDERS,
        lambda home: [],
        "folders whose regular files chat requests may name as images (a path or file:// URL); repeat "
        "the flag for several; none: every server file is refused",
        flag="--image-dir",
        commands=BOTH,
        shown_default="none",
        console_editable=False,
    ),
    Setting(
        "max_image_size",
        "OMLX_MAX_IMAGE_BYTES",
        BYTES,
        20 * 2**20,
        "largest image (a data: URL, a file or a download), bytes or 20MiB; larger ones get a 400",
        flag="--max-image-size",
        commands=BOTH,
        check=checks.positive,
        shown_default="20MiB",
    ),
    Setting(
        "image_timeout",
        "OMLX_IMAGE_TIMEOUT_SECONDS",
        NUMBER,
        20.0,
        "seconds to read one image file or download one image (redirects included); slower: a 400",
        flag="--image-timeout",
        commands=BOTH,
        check=checks.positive,
    ),
    Setting(
        "max_image_megapixels",
        "OMLX_MAX_IMAGE_MEGAPIXELS",
        NUMBER,
        25.0,
        "largest image in millions of pixels, read from its header before decoding; larger: a 400",
        flag="--max-image-megapixels",
        commands=BOTH,
        check=checks.positive,
    ),
    Setting(
        "max_images_per_request",
        "OMLX_MAX_IMAGES_PER_REQUEST",
        INTEGER,
        16,
        "images one chat request may hold (previous turns included); more get a 400",
        flag="--max-images-per-request",
        check=checks.at_least(1),
    ),
)
