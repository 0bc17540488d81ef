#!/usr/bin/env bash
# The GPU machine's one prepared call: install the carried wheels, print the software and the device, run the GPU
# tier and the GPU benchmarks, each under its own time limit, every output in one folder. The whole stays under
# 9.5 minutes on an H100 or H200 (limits: install 20 s, tier 215 s, training 140 s, decoding 120 s, SDPA kernels
# 80 s; on an H200 the tier took 95-106 s and training 104 s; on an H100 the tier ran 102 of its 105 tests in
# 172 s, and with the hybrid families 161 of its 165 in 180 s; training took 105-120 s, compiling three models on
# the host; the SDPA table took ~20 s a configuration, FlexAttention compiling; the whole call 507 s of wall
# time), so a lent machine's 15 minutes leave room for the second, shorter call (138 s on an H100).
# Python's output is unbuffered, so a step stopped at its limit still leaves what it printed; the tier lists its
# slowest tests.
#
#   bash benchmarks/gpu_check.sh                  # on the GPU machine, carrying .whl/ (make gpu-wheels, here)
#   bash benchmarks/gpu_check.sh hybrid           # the second, shorter call: the hybrids against Hugging Face
#                                                 # (benchmarks/bench_hybrid.py, 240 s), in hybrid.txt
#   GPU_CHECK_DRY_RUN=1 bash benchmarks/gpu_check.sh [hybrid]   # on a CPU: the same steps at tiny sizes (the tests
#                                                               # do this)
#
# Outputs go to $OUT (the device tool's folder that comes back) or, without it, out/gpu-check: versions.txt,
# tier.txt (tier-rest.txt: the tests after a CUDA fault, in fresh processes), train.txt, generate.txt, sdpa.txt
# and status.txt (each step's exit status: 124 is its time limit).
# GPU_PYTHON: the Python to use (default python3, the machine's own, with its CUDA build of torch).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu-check}
PY=${GPU_PYTHON:-python3}
DRY=${GPU_CHECK_DRY_RUN:-}
mkdir -p "$OUT"
: > "$OUT/status.txt"
export PYTHONUNBUFFERED=1

step() {  # step NAME LIMIT COMMAND...: run COMMAND under LIMIT seconds, output to $OUT/NAME.txt, status noted
  local name=$1 limit=$2
  shift 2
  local started=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local status=$?
  echo "$name $status $((SECONDS - started))s" | tee -a "$OUT/status.txt"
}

tier() {  # tier LIMIT PYTEST-ARGS...: the GPU tier within LIMIT seconds. A CUDA fault poisons the process: the
  # tier stops there (tests/conftest.py), and fresh processes go on with the tests it did not run, in tier-rest.txt
  local end=$((SECONDS + $1))
  shift
  export TFSPEC_REMAINING_TESTS="$OUT/remaining.txt"
  step tier $((end - SECONDS)) "$PY" -m pytest -q -m gpu -p no:cacheprovider "$@"
  while [ -s "$OUT/remaining.txt" ] && [ $((end - SECONDS)) -gt 10 ]; do
    local rest
    mapfile -t rest < "$OUT/remaining.txt"
    rm -f "$OUT/remaining.txt"
    { echo "--- going on with ${#rest[@]} tests in a fresh process"
      timeout --kill-after=10 $((end - SECONDS)) "$PY" -m pytest -q -p no:cacheprovider "${rest[@]}"
      echo "tier-rest $?"; } >> "$OUT/tier-rest.txt" 2>&1
  done
  rm -f "$OUT/remaining.txt"
  unset TFSPEC_REMAINING_TESTS
}

if [ -z "$DRY" ]; then  # the dry run uses this checkout's environment, which has them all
  if [ -d .whl ]; then  # lark, pydantic (with its matching pydantic-core), graphviz: what that machine lacks
    step install 20 "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target .gpu-site .whl/*.whl
  fi
  export PYTHONPATH=".gpu-site:.${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" - > "$OUT/versions.txt" 2>&1 <<'EOF'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "CUDA", torch.version.cuda,
      "cuDNN", torch.backends.cudnn.version() if torch.cuda.is_available() else None)
print("device", torch.cuda.get_device_name() if torch.cuda.is_available() else "none (CPU only)")
for name in ("transformers", "lark", "pydantic", "pydantic_core", "networkx", "hypothesis", "safetensors"):
    try:
        print(name, __import__(name).__version__)
    except Exception as exc:  # noqa: BLE001 - reported, not fatal: the tier says what it needs
        print(name, "missing:", type(exc).__name__, exc)
EOF
cat "$OUT/versions.txt"

if [ "${1:-}" = hybrid ]; then  # the second call
  if [ -n "$DRY" ]; then
    step hybrid 300 "$PY" benchmarks/bench_hybrid.py --device cpu --models granite --lengths 32 --repeats 1 --no-decode
  else
    step hybrid 240 "$PY" benchmarks/bench_hybrid.py --device cuda --lengths 1024 4096 16384 --repeats 2 --new 32
  fi
  echo "outputs in $OUT"
  ! grep -qv " 0 " "$OUT/status.txt"
  exit
fi

if [ -n "$DRY" ]; then  # the steps' plumbing on a CPU: a few tests of the tier, the benchmarks at their tiny size
  export TFSPEC_GPU_DEVICE=cpu
  tier 300 tests/test_gpu.py -k "torch_nn_transformer"
  TINY=(--size tiny --device cpu --no-compile --dtype float32)
  step train 300 "$PY" benchmarks/bench_gpu_train.py "${TINY[@]}" --rounds 1 --steps 1 --batch 2 --seq-len 32
  step generate 300 "$PY" benchmarks/bench_gpu_generate.py "${TINY[@]}" --new 4 --batches 1 --repeats 1 --profile
  step sdpa 300 "$PY" benchmarks/sdpa_backends.py --device cpu --dtype float32  # at its own length, as there
else
  tier 215 --durations=15 tests
  step train 140 "$PY" benchmarks/bench_gpu_train.py --rounds 2 --steps 10
  step generate 120 "$PY" benchmarks/bench_gpu_generate.py --repeats 1 --profile
  step sdpa 80 "$PY" benchmarks/sdpa_backends.py
fi
echo "outputs in $OUT"
! grep -qv " 0 " "$OUT/status.txt"  # exit 0 only when every step did
