"""Which BLAS library and which dtype MLX runs with on this machine.

MLX's Linux CPU wheel (``mlx[cpu]``) links a reference BLAS that runs float32 matmul ~30x slower
than an optimised one. Loading OpenBLAS with RTLD_GLOBAL *before* ``mlx.core`` is imported makes
libmlx bind its cblas/LAPACK symbols to OpenBLAS instead (the dynamic linker searches the global
scope before libmlx's own dependencies), with no LD_PRELOAD and no rebuilt wheel. Only float32
goes through BLAS on the CPU; bfloat16/float16 matmuls use MLX's own slow loops, so on a CPU the
fast path is float32 weights through OpenBLAS.

On macOS MLX uses Accelerate and Metal; on a CUDA build matmuls run on the GPU, where MLX does
float32 matmuls in TF32 unless MLX_ENABLE_TF32=0 (a relative error of ~3e-4 on a 2048-wide
product, measured on an H200: enough to change a greedy token). omlx sets MLX_ENABLE_TF32=0 there
unless the environment sets it, so a float32 model gives the tokens it gives on a CPU and on
Metal (and transformers); half-precision models are not affected.

Environment:
    OMLX_BLAS       auto (default) | reference | off -- reference/off keep the wheel's own BLAS.
    OMLX_BLAS_PATH  the OpenBLAS shared library to load instead of searching for one.
    OMLX_DTYPE      auto (default) | float32 | bfloat16 | float16 -- the dtype models run in.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.metadata
import logging
import os
import sys
from typing import Optional

log = logging.getLogger(__name__)

BLAS_CHOICES = ("auto", "reference", "off")
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")

# The mlx wheels that run on an NVIDIA GPU; looked up by name so that checking never imports mlx.
_CUDA_DISTRIBUTIONS = ("mlx-cuda", "mlx-cuda-12", "mlx-cuda-13")

_decided = False  # preload_fast_blas() has run its course in this process
_blas_path: Optional[str] = None  # the OpenBLAS library loaded, if any
_blas_handle: Optional[ctypes.CDLL] = None  # kept so the library is never unloaded


def preload_fast_blas() -> Optional[str]:
    """Load OpenBLAS into the global symbol scope so that mlx.core binds to it; return its path.

    Idempotent. A no-op (None) off Linux, with a CUDA build of mlx (which gets MLX_ENABLE_TF32=0
    unless the environment sets it: the module docstring), with OMLX_BLAS=reference|off,
    when no OpenBLAS is installed, and when mlx.core is already imported (its symbols are bound at
    import, so loading OpenBLAS then would change nothing). Never imports mlx itself.
    """
    global _decided, _blas_path, _blas_handle
    if _decided:
        return _blas_path
    choice = _env_choice("OMLX_BLAS", BLAS_CHOICES)
    if sys.platform.startswith("linux") and _cuda_installed():
        # Read by libmlx at its first float32 matmul, so setting it before mlx.core runs suffices.
        os.environ.setdefault("MLX_ENABLE_TF32", "0")
        _decided = True
        return None
    if choice != "auto" or not sys.platform.startswith("linux"):
        _decided = True
        return None
    if "mlx.core" in sys.modules:
        log.warning(
            "mlx.core was imported before inference.platform.preload_fast_blas(): too late to "
            "load OpenBLAS, float32 matmul stays on the slow reference BLAS; import inference first"
        )
        _decided = True
        return None

    path = os.environ.get("OMLX_BLAS_PATH") or _find_openblas()
    if path is None:
        log.warning(
            "no OpenBLAS found: CPU matmuls use MLX's slow reference BLAS; "
            "install it with `apt-get install libopenblas0-pthread`"
        )
    else:
        try:
            _blas_handle = ctypes.CDLL(path, mode=os.RTLD_GLOBAL | os.RTLD_NOW)
        except OSError as exc:
            # Only an explicit OMLX_BLAS_PATH can name a file that fails to load: say so loudly.
            raise OSError(f"OMLX_BLAS_PATH={path!r} could not be loaded: {exc}") from exc
        _blas_path = path
    _decided = True
    return _blas_path


def default_dtype() -> Optional[str]:
    """The dtype to run models in: OMLX_DTYPE if set, else "float32" on the CPU backend (the only
    dtype that goes through BLAS there), else None, meaning the model's own dtype (GPUs run
    bfloat16/float16 at full speed and with half the memory)."""
    choice = _env_choice("OMLX_DTYPE", DTYPE_CHOICES)
    if choice != "auto":
        return choice
    return "float32" if _backend() == "cpu" else None


def describe() -> dict:
    """Backend, BLAS library and default dtype, for the start-up log and the admin panel."""
    if sys.platform == "darwin":
        blas = "accelerate"
    else:
        blas = _blas_path or "reference"
    return {"backend": _backend(), "blas": blas, "dtype": default_dtype()}


def _backend() -> str:
    import mlx.core as mx

    if mx.metal.is_available():
        return "metal"
    cuda = getattr(mx, "cuda", None)
    if cuda is not None and cuda.is_available():
        return "cuda"
    return "cpu"


def _env_choice(name: str, choices: tuple) -> str:
    value = os.environ.get(name, "").strip().lower() or "auto"
    if value not in choices:
        raise ValueError(f"{name}={value!r}: allowed values are {', '.join(choices)}")
    return value


def _cuda_installed() -> bool:
    for name in _CUDA_DISTRIBUTIONS:
        try:
            importlib.metadata.distribution(name)
            return True
        except importlib.metadata.PackageNotFoundError:
            pass
    return False


def _find_openblas() -> Optional[str]:
    """Debian/Ubuntu install OpenBLAS under the multiarch directory, one variant per threading
    model; pthread first (it does not pull in an OpenMP runtime)."""
    triplet = getattr(sys.implementation, "_multiarch", None) or f"{os.uname().machine}-linux-gnu"
    for directory in (f"/usr/lib/{triplet}", "/usr/lib64", "/usr/lib"):
        for variant in ("openblas-pthread/", "openblas-openmp/", ""):
            path = f"{directory}/{variant}libopenblas.so.0"
            if os.path.exists(path):
                return path
    return ctypes.util.find_library("openblas")
