"""inference.platform: the OpenBLAS preload, its opt-out, and the default dtype.

The preload only works before mlx.core is imported, and pytest has imported it long before these
tests run, so everything about the preload runs in a fresh interpreter.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from inference import platform

REPO = Path(__file__).resolve().parents[2]

# Random float32 products in the shapes the engine uses: plain, transposed operands, a strided
# (non-contiguous) slice, batched, broadcast batch, matrix-vector, and addmm (gemm with beta != 0).
MATMUL_SCRIPT = r"""
import sys
import numpy as np
import inference  # preloads OpenBLAS unless OMLX_BLAS says otherwise
import mlx.core as mx

rng = np.random.default_rng(0)
def r(*shape):
    return rng.standard_normal(shape, dtype=np.float32)
a, b = r(64, 96), r(96, 80)
big = r(128, 192)
x3, y3 = r(4, 33, 96), r(4, 96, 17)
w = r(96, 40)
v = r(96)
c = r(64, 80)
cases = {
    "plain": (a, b, lambda p, q: p @ q),
    "a_transposed": (a.T.copy(), b, lambda p, q: p.T @ q),
    "b_transposed": (a, b.T.copy(), lambda p, q: p @ q.T),
    "strided": (big, b, lambda p, q: p[::2, 1::2] @ q),
    "batched": (x3, y3, lambda p, q: p @ q),
    "broadcast": (x3, w, lambda p, q: p @ q),
    "matvec": (a, v, lambda p, q: p @ q),
}
out = {}
for name, (p, q, f) in cases.items():
    out[name] = np.array(f(mx.array(p), mx.array(q)))
out["addmm"] = np.array(mx.addmm(mx.array(c), mx.array(a), mx.array(b), alpha=0.5, beta=2.0))
np.savez(sys.argv[1], **out)
"""


PLATFORM_VARS = ("OMLX_BLAS", "OMLX_BLAS_PATH", "OMLX_DTYPE")


def clean_env():
    """This process's environment without the variables under test."""
    return {k: v for k, v in os.environ.items() if k not in PLATFORM_VARS}


def run_python(code, env_overrides, *args):
    """Run code in a fresh interpreter from the repo root; return its stdout."""
    env = clean_env()
    env.update(env_overrides)
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def describe_in_subprocess(env):
    code = (
        "import json, inference\nfrom inference import platform\n"
        "d = platform.describe()\n"
        "d['mapped'] = 'libopenblas' in open('/proc/self/maps').read()\n"
        "print(json.dumps(d))"
    )
    return json.loads(run_python(code, env))


def openblas_path():
    return platform._find_openblas() if sys.platform.startswith("linux") else None


needs_openblas = pytest.mark.skipif(
    openblas_path() is None or platform._cuda_installed(),
    reason="no OpenBLAS on this machine (apt-get install libopenblas0-pthread), or a CUDA build",
)


@needs_openblas
def test_preload_loads_openblas_before_mlx():
    info = describe_in_subprocess({})
    assert info["backend"] == "cpu"
    assert "openblas" in info["blas"]
    assert info["mapped"]


@needs_openblas
@pytest.mark.parametrize("value", ["reference", "off", "REFERENCE"])
def test_omlx_blas_reference_keeps_the_wheel_blas(value):
    info = describe_in_subprocess({"OMLX_BLAS": value})
    assert info["blas"] == "reference"
    assert not info["mapped"]


@needs_openblas
def test_omlx_blas_path_is_used_as_given():
    path = os.path.realpath(openblas_path())
    info = describe_in_subprocess({"OMLX_BLAS_PATH": path})
    assert info["blas"] == path
    assert info["mapped"]


def test_omlx_blas_path_that_does_not_load_is_an_error():
    if not sys.platform.startswith("linux") or platform._cuda_installed():
        pytest.skip("the preload only runs on a Linux CPU build")
    env = clean_env()
    env["OMLX_BLAS_PATH"] = "/nonexistent/libopenblas.so.0"
    proc = subprocess.run(
        [sys.executable, "-c", "import inference"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "OMLX_BLAS_PATH" in proc.stderr


def test_bad_omlx_blas_value_is_rejected():
    env = clean_env()
    env["OMLX_BLAS"] = "fast"
    proc = subprocess.run(
        [sys.executable, "-c", "import inference"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "allowed values are auto, reference, off" in proc.stderr


def test_preload_after_mlx_is_a_warned_no_op():
    code = (
        "import logging\nlogging.basicConfig()\nimport mlx.core\nimport inference\n"
        "from inference import platform\nprint(platform.preload_fast_blas(), "
        "platform.describe()['blas'])"
    )
    env = clean_env()
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    expected_blas = "accelerate" if sys.platform == "darwin" else "reference"
    assert proc.stdout.split() == ["None", expected_blas]
    if sys.platform.startswith("linux") and not platform._cuda_installed():
        assert "too late" in proc.stderr


@needs_openblas
def test_openblas_matmul_matches_reference(tmp_path):
    fast, slow = tmp_path / "fast.npz", tmp_path / "slow.npz"
    run_python(MATMUL_SCRIPT, {}, str(fast))
    run_python(MATMUL_SCRIPT, {"OMLX_BLAS": "reference"}, str(slow))
    fast, slow = np.load(fast), np.load(slow)
    assert sorted(fast.files) == sorted(slow.files)
    for name in fast.files:
        assert fast[name].shape == slow[name].shape, name
        assert np.allclose(fast[name], slow[name], rtol=1e-4, atol=1e-4), name


@needs_openblas
def test_openblas_matmul_matches_numpy(tmp_path):
    """Both runs agree with each other; this pins them to float64 numpy, so agreeing on a wrong
    answer (say, a transposed operand read the wrong way) cannot pass."""
    out = tmp_path / "fast.npz"
    run_python(MATMUL_SCRIPT, {}, str(out))
    got = np.load(out)
    rng = np.random.default_rng(0)

    def r(*shape):
        return rng.standard_normal(shape, dtype=np.float32).astype(np.float64)

    a, b, big = r(64, 96), r(96, 80), r(128, 192)
    x3, y3, w, v, c = r(4, 33, 96), r(4, 96, 17), r(96, 40), r(96), r(64, 80)
    want = {
        "plain": a @ b,
        "a_transposed": a @ b,
        "b_transposed": a @ b,
        "strided": big[::2, 1::2] @ b,
        "batched": x3 @ y3,
        "broadcast": x3 @ w,
        "matvec": a @ v,
        "addmm": 0.5 * (a @ b) + 2.0 * c,
    }
    for name, expected in want.items():
        assert np.allclose(got[name], expected, rtol=1e-4, atol=1e-4), name


LINALG_SCRIPT = r"""
import json
import numpy as np
import inference
import mlx.core as mx

rng = np.random.default_rng(0)
a = rng.standard_normal((48, 48)).astype(np.float32)
s = a @ a.T + 48 * np.eye(48, dtype=np.float32)
A, S, cpu = mx.array(a), mx.array(s), mx.cpu
q, r = mx.linalg.qr(A, stream=cpu)
u, sv, vt = mx.linalg.svd(A, stream=cpu)
chol = mx.linalg.cholesky(S, stream=cpu)
errors = {
    "inv": np.abs(np.array(mx.linalg.inv(A, stream=cpu)) @ a - np.eye(48)).max(),
    "cholesky": np.abs(np.array(chol @ chol.T) - s).max() / np.abs(s).max(),
    "qr": np.abs(np.array(q @ r) - a).max(),
    "svd": np.abs(np.array((u * sv) @ vt) - a).max(),
    "eigh": np.abs(np.array(mx.linalg.eigvalsh(S, stream=cpu)) - np.linalg.eigvalsh(s)).max()
    / np.abs(s).max(),
}
print(json.dumps({k: float(v) for k, v in errors.items()}))
"""


@needs_openblas
def test_lapack_calls_work_through_openblas():
    """OpenBLAS also carries LAPACK, so mx.linalg binds to it as well: check that still works."""
    errors = json.loads(run_python(LINALG_SCRIPT, {}))
    assert all(err < 1e-4 for err in errors.values()), errors


def test_preload_is_a_no_op_off_linux(monkeypatch):
    monkeypatch.setattr(platform, "_decided", False)
    monkeypatch.setattr(platform, "_blas_path", None)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert platform.preload_fast_blas() is None
    assert platform._blas_path is None


def test_preload_is_a_no_op_with_mlx_cuda(monkeypatch):
    monkeypatch.setattr(platform, "_decided", False)
    monkeypatch.setattr(platform, "_blas_path", None)
    monkeypatch.setattr(platform, "_cuda_installed", lambda: True)
    monkeypatch.setattr(platform, "_find_openblas", lambda: pytest.fail("searched for OpenBLAS"))
    assert platform.preload_fast_blas() is None


@pytest.mark.parametrize("preset", [None, "1"])
def test_mlx_cuda_gets_exact_float32_matmuls_unless_the_user_chose(monkeypatch, preset):
    """On a CUDA build MLX would do float32 matmuls in TF32 (relative error ~3e-4 on an H200,
    enough to change greedy tokens): omlx turns it off, unless MLX_ENABLE_TF32 is set already."""
    monkeypatch.setattr(platform, "_decided", False)
    monkeypatch.setattr(platform, "_blas_path", None)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("MLX_ENABLE_TF32", "set here")  # so that teardown restores the variable
    if preset is None:
        monkeypatch.delenv("MLX_ENABLE_TF32")
    else:
        monkeypatch.setenv("MLX_ENABLE_TF32", preset)
    monkeypatch.setattr(platform, "_cuda_installed", lambda: False)
    platform.preload_fast_blas()
    assert os.environ.get("MLX_ENABLE_TF32") == preset  # not on a CPU build
    monkeypatch.setattr(platform, "_decided", False)
    monkeypatch.setattr(platform, "_cuda_installed", lambda: True)
    platform.preload_fast_blas()
    assert os.environ["MLX_ENABLE_TF32"] == (preset or "0")


def test_preload_is_idempotent(monkeypatch):
    monkeypatch.setattr(platform, "_decided", True)
    monkeypatch.setattr(platform, "_blas_path", "/some/libopenblas.so.0")
    assert platform.preload_fast_blas() == "/some/libopenblas.so.0"


@pytest.mark.parametrize("value", ["float32", "bfloat16", "float16", " Float16 "])
def test_default_dtype_honors_omlx_dtype(monkeypatch, value):
    monkeypatch.setenv("OMLX_DTYPE", value)
    assert platform.default_dtype() == value.strip().lower()


@pytest.mark.parametrize("value", [None, "auto", ""])
def test_default_dtype_auto_is_float32_on_cpu_and_model_dtype_on_gpu(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("OMLX_DTYPE", raising=False)
    else:
        monkeypatch.setenv("OMLX_DTYPE", value)
    expected = "float32" if platform._backend() == "cpu" else None
    assert platform.default_dtype() == expected


@pytest.mark.parametrize("value", ["fp32", "float64", "int8"])
def test_default_dtype_rejects_unknown_values(monkeypatch, value):
    monkeypatch.setenv("OMLX_DTYPE", value)
    with pytest.raises(ValueError, match="auto, float32, bfloat16, float16"):
        platform.default_dtype()


def test_describe_has_backend_blas_and_dtype(monkeypatch):
    monkeypatch.delenv("OMLX_DTYPE", raising=False)
    info = platform.describe()
    assert set(info) == {"backend", "blas", "dtype"}
    assert info["backend"] in ("cpu", "metal", "cuda")
    assert info["dtype"] == platform.default_dtype()
