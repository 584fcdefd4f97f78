"""Commands of `omlx` for people at a terminal: pull, import, models, cache, keys, bench, launch.

Each module has ``add_parser(subparsers)``, which registers its command with ``run(args) -> exit
code`` as the parser's default; omlx_site/cli.py calls ``add_parsers`` and runs ``args.run``.
What several commands share is in ``common``; this module only imports downward.
"""

from __future__ import annotations

from . import bench, cache, gguf_import, keys, launch, models, pull


def add_parsers(subparsers) -> None:
    for module in (pull, gguf_import, models, cache, keys, bench, launch):
        module.add_parser(subparsers)
