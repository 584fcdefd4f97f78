"""The real `omlx keys` command against a live server's OMLX_HOME (tests of inference/keys/)."""

import os
import subprocess
import sys


def omlx_keys(home, *args, check=True):
    """Runs `omlx keys ARGS` on the database of the server whose home is ``home``."""
    env = dict(os.environ, OMLX_HOME=str(home), OMLX_DATABASE=str(home / "omlx.sqlite3"))
    env.pop("OMLX_API_KEY", None)
    done = subprocess.run(
        [sys.executable, "-m", "omlx_site.cli", "keys", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"omlx keys {' '.join(args)}: {done.returncode}\n{done.stdout}{done.stderr}")
    return done


def create_key(home, name, *scopes, share_cache=False) -> str:
    args = ["create", "--name", name] + [f"--scope={s}" for s in scopes]
    if share_cache:
        args.append("--share-cache")
    return omlx_keys(home, *args).stdout.strip()
