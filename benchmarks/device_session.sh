#!/usr/bin/env bash
# Issue 33's checks on one CUDA GPU, as one script (the device machine is lent for 15 minutes in
# all, machine start included): run from the repository root,
#
#     bash benchmarks/device_session.sh            # logs and JSON under $OUT (default /tmp/pmverify_device)
#
# Each step has its own time limit (seconds; all together 540 s, 570 s with each step's 5 s to
# exit once killed: run it with a 600 s limit; about 300 s expected), so that one that hangs leaves
# the others their time; each writes $OUT/<step>.log, and $OUT/summary.txt gets one line per step
# (exit status, seconds). Steps, in order of what the issue needs most:
#
#   versions   nvidia-smi, python, torch, triton, hypothesis, transformers (the machine's own:
#              nothing can be installed there; pmverify runs from this checkout through PYTHONPATH,
#              and a dist-info under $SITE registers its pytest plugin and version)
#   gpu_tests  every @pytest.mark.gpu test (tests/gpu and the others), compiled Triton kernels, but
#              the selfcheck, audit and tiny-model ones (the steps below run them, with reports)
#   benchmark  benchmarks/qk_norm_gpu.py: MiniMax-M2 bf16, T = 1 ... 16384, GB/s vs a D2D copy,
#              speed-up over Inductor, error vs float64 -> $OUT/qk_norm_gpu.json
#   verify     verify(QKNormFusionPass, qk_norm_cases(), device="cuda") at 200 cases, and the
#              compiled tiny MiniMax-M2 on cuda: matches and max error -> $OUT/verify_cuda.json
#   selfcheck  pmverify selfcheck --device cuda for the kernel faults -> $OUT/selfcheck.json
#   audit      pmverify audit --device cuda of the CUDA-gated entries (pad_mm, prepare_softmax)
#              -> $OUT/audit_cuda.json; exit status 1 is expected (pad_mm's training patterns are
#              dead patterns on every machine): read its report, not its status
#
# Expected exit statuses in summary.txt: 0 everywhere but audit (1, see above); 124 is a step
# killed at its limit. The machine's own python3 (torch, triton, hypothesis, pytest, transformers)
# is used: the versions step says what it has, and a step that lacks something fails alone.
#
# TRITON_INTERPRET is 0 throughout: the kernels are compiled for the GPU.
set -u -o pipefail
OUT=${OUT:-/tmp/pmverify_device}
SITE=${SITE:-/tmp/pmverify_site}
PY=${PYTHON:-python3}
rm -rf "$SITE"
mkdir -p "$OUT" "$SITE/pmverify-0.0.0.dist-info"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}" TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
export PMVERIFY_REPRO_DIR="$OUT/reproducers"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)
mv "$SITE/pmverify-0.0.0.dist-info" "$SITE/pmverify-$version.dist-info" 2>/dev/null || true
printf 'Metadata-Version: 2.1\nName: pmverify\nVersion: %s\n' "$version" >"$SITE/pmverify-$version.dist-info/METADATA"
printf '[pytest11]\npmverify = pytest_pmverify\n' >"$SITE/pmverify-$version.dist-info/entry_points.txt"
: >"$OUT/summary.txt"

step() {  # step NAME LIMIT_S COMMAND...: run, log, one summary line, the log's tail
    local name=$1 limit=$2 start rc
    shift 2
    echo "== $name (limit ${limit}s)"
    start=$(date +%s)
    timeout -k 5 "$limit" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    echo "$name rc=$rc $(($(date +%s) - start))s" | tee -a "$OUT/summary.txt"
    tail -n "${TAIL:-25}" "$OUT/$name.log"
}

step versions 30 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; $PY -c '
import sys, torch, triton, hypothesis
print(sys.version.split()[0], \"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"triton\", triton.__version__,
      \"hypothesis\", hypothesis.__version__, torch.cuda.get_device_name())
try:
    import transformers; print(\"transformers\", transformers.__version__)
except ImportError as exc: print(\"no transformers:\", exc)
import pmverify, pmverify.device; print(\"pmverify\", pmverify.__version__, \"from\", pmverify.__file__)
'"

step gpu_tests 170 "$PY" -m pytest -p no:cacheprovider -q -m gpu -o addopts="" --durations=10 \
    -k "not selfcheck and not audit and not minimax" --pmverify-report "$OUT/gpu_tests.json" tests

TAIL=40 step benchmark 140 "$PY" benchmarks/qk_norm_gpu.py --tokens 1 128 1024 4096 16384 --iters 100 --warmup 20 --json "$OUT/qk_norm_gpu.json"

step verify 100 "$PY" - "$OUT/verify_cuda.json" <<'EOF'
import json, sys, time
import torch
from hypothesis import HealthCheck, settings
import pmverify
from pmverify.fusions.qk_norm import QKNormFusionPass
from pmverify.fusions.qk_norm.real_model import check_minimax_m2
from pmverify.fusions.qk_norm.testing import qk_norm_cases

out = {"device": torch.cuda.get_device_name()}
start = time.perf_counter()
summary = pmverify.verify(QKNormFusionPass, qk_norm_cases(), max_examples=200, seed=0, device="cuda",
                          settings=settings(database=None, suppress_health_check=list(HealthCheck)))
out["verify"] = {"seconds": time.perf_counter() - start, "summary": summary.describe()}
print("verify on cuda:", out["verify"])
json.dump(out, open(sys.argv[1], "w"), indent=2, default=str)  # kept if the model checks fail
for dynamic in (False, True):
    result = check_minimax_m2(device="cuda", dynamic=dynamic)
    out[f"minimax_m2{'_dynamic' if dynamic else ''}"] = {
        "ok": result.ok, "matches": result.matches, "expected": result.expected_matches,
        "max_abs_err": result.max_abs_err, "tolerance": result.tolerance, "detail": result.detail}
    print(result.detail)
    json.dump(out, open(sys.argv[1], "w"), indent=2, default=str)
json.dump(out, open(sys.argv[1], "w"), indent=2, default=str)
EOF

step selfcheck 50 "$PY" -m pmverify selfcheck --device cuda --fault QKNormKernelGridCapped \
    --fault QKNormKernelUnmaskedLoads --fault QKNormKernelLeavesKOutUnwritten --max-examples 60 --no-shrink \
    --report "$OUT/selfcheck.json"

step audit 50 "$PY" -m pmverify audit --device cuda --rewrite 'pad_mm/*' --rewrite '*prepare_softmax*' \
    --max-examples 10 --jobs 4 --report "$OUT/audit_cuda.json"

echo "== summary"
cat "$OUT/summary.txt"
