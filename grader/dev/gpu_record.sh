#!/usr/bin/env bash
# Record chapter 9's benchmark on a CUDA GPU, in one short run.
#
#   bash grader/dev/gpu_record.sh [extra options for python -m grader.dev.attention_bench]
#
# What it does, from the repository root:
#   1. picks a Python whose torch sees a GPU: $PYTHON if set, else .venv/bin/python, python3, python;
#   2. prints the versions it will record (torch, CUDA, GPU, triton); installs nothing: the PyTorch CUDA
#      wheels bring triton along, and `python -m grader.dev.attention_bench` runs from the checkout without being
#      installed (a missing triton only turns the Triton column into "unavailable");
#   3. optionally (RUN_TESTS=1, needs pytest) runs the kernel's GPU tests, tests/test_flash_triton.py -k cuda;
#   4. runs `python -m grader.dev.attention_bench` under `timeout` ($BENCH_TIMEOUT seconds, default 540). The benchmark
#      checks the Triton kernels against float64 first, then writes
#      book/ch09_flash/data/bench-<device-slug>-<date>.json after every case (so a run cut short keeps what
#      it measured) and prints the table and the chapter's targets (MET / NOT MET);
#   5. copies the JSON to $OUT as well when that variable names a folder (remote runners collect $OUT).
#
# Budget on an H200: about 5 minutes (kernel compilation included). Nothing here needs the network.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

has_cuda_torch() {
    "$1" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1
}

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
    for cand in .venv/bin/python python3 python; do
        if command -v "$cand" >/dev/null 2>&1 && has_cuda_torch "$cand"; then PY="$cand"; break; fi
    done
fi
if [ -z "$PY" ] || ! has_cuda_torch "$PY"; then
    echo "gpu_record: no Python with a CUDA-enabled torch that sees a GPU (set PYTHON=/path/to/python)" >&2
    exit 2
fi

"$PY" - <<'PYEOF'
import platform
import torch
print(f"python {platform.python_version()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"GPU {torch.cuda.get_device_name(0)} (capability {torch.cuda.get_device_capability(0)})")
try:
    import triton
    print(f"triton {triton.__version__}")
except ImportError:
    print("triton: not installed; the Triton column will read 'unavailable'")
try:
    import numpy  # noqa: F401  (solutions.complexity needs it)
except ImportError:
    print("numpy: not installed; FLOPs come from the benchmark's fallback formula (recorded in the JSON)")
PYEOF

if [ "${RUN_TESTS:-0}" = "1" ] && "$PY" -c 'import pytest' >/dev/null 2>&1; then
    timeout 300 "$PY" -m pytest -q -p no:cacheprovider tests/test_flash_triton.py -k cuda \
        || echo "gpu_record: WARNING: the GPU kernel tests failed (see above)" >&2
fi

LOG="$(mktemp)"
status=0
timeout "${BENCH_TIMEOUT:-540}" "$PY" -m grader.dev.attention_bench "$@" | tee "$LOG" || status=$?
JSON="$(sed -n 's/^wrote //p' "$LOG" | tail -n 1)"
if [ -z "$JSON" ]; then
    # cut short: the newest record still holds every finished case ("complete": false)
    JSON="$(ls -t book/ch09_flash/data/bench-*.json 2>/dev/null | head -n 1 || true)"
fi
if [ -n "${OUT:-}" ] && [ -d "${OUT}" ] && [ -n "$JSON" ]; then
    cp "$JSON" "$OUT/"
fi
echo "gpu_record: record ${JSON:-<none>} (exit status $status)"
rm -f "$LOG"
exit "$status"
