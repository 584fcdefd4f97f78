#!/usr/bin/env bash
# The coding agents that `omlx launch` starts, for its end-to-end tests (tests/live/test_launch.py):
# Claude Code, Codex CLI and opencode from npm into a private prefix, aider from PyPI into its own
# venv (its pinned dependencies must not touch omlx's). Everything goes under $OMLX_CLIENTS_DIR
# (default .clients/ here); nothing is installed globally. Never fatal: a client that cannot be
# installed is skipped by the tests with the reason.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${OMLX_CLIENTS_DIR:-$ROOT/.clients}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$DIR"
if command -v npm >/dev/null 2>&1; then
  for pkg in @anthropic-ai/claude-code @openai/codex opencode-ai; do
    bin=$(case $pkg in @anthropic-ai/claude-code) echo claude;; @openai/codex) echo codex;; *) echo opencode;; esac)
    [ -x "$DIR/npm/bin/$bin" ] && continue
    npm install -g --prefix "$DIR/npm" --no-fund --no-audit --loglevel=error "$pkg" >/dev/null 2>&1 \
      || echo "omlx: could not install $pkg from npm (its launch test will be skipped)" >&2
  done
else
  echo "omlx: npm not found: Claude Code, Codex and opencode launch tests will be skipped (apt-get install npm)" >&2
fi
if [ ! -x "$DIR/aider/bin/aider" ]; then
  { "$PYTHON" -m venv "$DIR/aider" && "$DIR/aider/bin/python" -m pip install -q aider-chat; } >/dev/null 2>&1 \
    || echo "omlx: could not install aider-chat from PyPI (its launch test will be skipped)" >&2
fi
exit 0
