#!/usr/bin/env bash
# System packages omlx uses when they can be had: Debian's OpenBLAS makes MLX's float32 matmul on a
# Linux CPU ~25-50x faster than the reference BLAS bundled in the mlx wheel; redis-server is for
# Redis mode (`omlx serve --redis-url`, `omlx worker`) and its test; chromium is the browser of the
# admin console's end-to-end tests (driven by Playwright); fuse3 (libfuse3 and fusermount3) is for the
# power-loss tests' file system (tests/support/powerloss_fs.py); npm installs the coding agents that
# `omlx launch`'s tests run (scripts/install_clients.sh). Never fatal: without them omlx still runs
# (slower; no Redis mode unless you point it at a Redis elsewhere; the browser tests fail with a hint).
set -u
[ "$(uname -s)" = "Linux" ] || exit 0
command -v dpkg-query >/dev/null 2>&1 || exit 0
need=""
dpkg-query -W -f='${Status}' libopenblas0-pthread 2>/dev/null | grep -q "install ok installed" || need="$need libopenblas0-pthread"
command -v redis-server >/dev/null 2>&1 \
  || dpkg-query -W -f='${Status}' redis-server 2>/dev/null | grep -q "install ok installed" || need="$need redis-server"
command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || need="$need chromium"
dpkg-query -W -f='${Status}' fuse3 2>/dev/null | grep -q "install ok installed" || need="$need fuse3"
command -v npm >/dev/null 2>&1 || need="$need npm"
[ -z "$need" ] && exit 0
if [ "$(id -u)" = "0" ]; then
  apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null 2>&1 \
    || echo "omlx: could not install$need (CPU inference slower without OpenBLAS; Redis mode needs redis-server; browser tests need chromium; power-loss tests need fuse3; launch tests need npm)" >&2
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo apt-get update -qq >/dev/null 2>&1 || true
  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null 2>&1 || true
else
  echo "omlx: please install$need (apt-get install$need): OpenBLAS for fast CPU inference, redis-server for Redis mode, chromium for the browser tests, fuse3 for the power-loss tests, npm for the launch tests" >&2
fi
exit 0
