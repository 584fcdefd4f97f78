#!/usr/bin/env bash
# System packages omlx uses when they can be had: Debian's OpenBLAS makes MLX's float32 matmul on a
# Linux CPU ~25-50x faster than the reference BLAS bundled in the mlx wheel. Never fatal: without it
# omlx still runs, just slower, and says so at start.
set -u
[ "$(uname -s)" = "Linux" ] || exit 0
command -v dpkg-query >/dev/null 2>&1 || exit 0
need=""
dpkg-query -W -f='${Status}' libopenblas0-pthread 2>/dev/null | grep -q "install ok installed" || need="$need libopenblas0-pthread"
[ -z "$need" ] && exit 0
if [ "$(id -u)" = "0" ]; then
  apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null 2>&1 \
    || echo "omlx: could not install$need; CPU inference will be slower" >&2
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo apt-get update -qq >/dev/null 2>&1 || true
  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null 2>&1 || true
else
  echo "omlx: please install$need (apt-get install$need) for fast CPU inference" >&2
fi
exit 0
