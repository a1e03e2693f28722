#!/bin/bash
# make test-torch: Theseus against the newest PyTorch as its users install it
# (pip install torch: the CUDA wheel and the NVIDIA NCCL wheel it depends on).
# No GPU needed. Checks:
#   1. every NCCL symbol libtorch_cuda.so imports is exported by our libnccl.so.2;
#   2. our exports are a superset of the NCCL wheel's (its libnccl.so.2);
#   3. LD_PRELOAD=<build>/lib/libnccl.so.2 python3 -c 'import torch, torch.distributed'
#      loads, torch.cuda.nccl.version() answers 2.30.7, and the ncclGetVersion it
#      reaches is ours (the address lies in our library's mapping).
# The environment (several GB) is cached in $THESEUS_TORCH_CACHE (default
# ~/.cache/theseus/torch) and reused; THESEUS_TORCH_UPGRADE=1 fetches the newest again.
set -euo pipefail
BUILD=${1:-build}
LIB=$(readlink -f "$BUILD/lib/libnccl.so.2")
CACHE=${THESEUS_TORCH_CACHE:-$HOME/.cache/theseus/torch}
VENV=$CACHE/venv
PY=${THESEUS_TORCH_PYTHON:-python3}
[ -f "$LIB" ] || { echo "test-torch: $LIB not built (make build first)" >&2; exit 1; }

if [ ! -x "$VENV/bin/python" ]; then
  echo "test-torch: creating $VENV (pip install torch; a large download, done once)"
  mkdir -p "$CACHE"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check torch
elif [ "${THESEUS_TORCH_UPGRADE:-0}" = 1 ]; then
  "$VENV/bin/pip" install -q --disable-pip-version-check --upgrade torch
fi

SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
TORCH_CUDA=$(ls "$SITE"/torch/lib/libtorch_cuda.so)
WHEEL_NCCL=$(ls "$SITE"/nvidia/nccl/lib/libnccl.so.2 2>/dev/null || ls "$SITE"/nvidia/*/lib/libnccl.so.2 | head -1)
TORCH_VERSION=$("$VENV/bin/pip" show torch | awk '/^Version:/ {print $2}')
NCCL_WHEEL=$("$VENV/bin/pip" list 2>/dev/null | awk '/^nvidia-nccl/ {print $1 " " $2}')
echo "test-torch: torch $TORCH_VERSION, $NCCL_WHEEL ($WHEEL_NCCL)"

exports() { nm -D --defined-only "$1" | awk '$2 ~ /^[TWiV]$/ {print $3}' | sed 's/@.*//' | grep -E '^p?nccl' | sort -u; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
exports "$LIB" > "$TMP/ours"
exports "$WHEEL_NCCL" > "$TMP/wheel"
nm -D --undefined-only "$TORCH_CUDA" | awk '{print $NF}' | sed 's/@.*//' | grep -E '^p?nccl' | sort -u > "$TMP/torch"

fail=0
missing=$(comm -23 "$TMP/torch" "$TMP/ours")
if [ -n "$missing" ]; then
  echo "test-torch: FAIL: libtorch_cuda.so imports NCCL symbols Theseus does not export:"; echo "$missing" | sed 's/^/  /'
  fail=1
else
  echo "test-torch: ok: all $(wc -l < "$TMP/torch") NCCL symbols libtorch_cuda.so imports are exported"
fi
missing=$(comm -23 "$TMP/wheel" "$TMP/ours")
if [ -n "$missing" ]; then
  echo "test-torch: FAIL: the NCCL wheel exports symbols Theseus does not:"; echo "$missing" | sed 's/^/  /'
  fail=1
else
  echo "test-torch: ok: Theseus exports all $(wc -l < "$TMP/wheel") symbols of the NCCL wheel ($(wc -l < "$TMP/ours") in all)"
fi

cat > "$TMP/load.py" <<'PY'
import ctypes, sys
import torch, torch.distributed
v = torch.cuda.nccl.version()
lib = sys.argv[1]
addr = ctypes.cast(ctypes.CDLL(None).ncclGetVersion, ctypes.c_void_p).value
owner = None
for line in open("/proc/self/maps"):
    parts = line.split()
    lo, hi = (int(x, 16) for x in parts[0].split("-"))
    if lo <= addr < hi and len(parts) >= 6:
        owner = parts[5]
print(f"torch {torch.__version__}: torch.cuda.nccl.version() = {v}; ncclGetVersion lives in {owner}")
print(f"torch.distributed available: {torch.distributed.is_available()}, NCCL backend: {torch.distributed.is_nccl_available()}")
if owner != lib:
    sys.exit(f"ncclGetVersion was not Theseus' ({lib})")
if tuple(v) != (2, 30, 7):
    sys.exit(f"expected 2.30.7, got {v}")
PY
if LD_PRELOAD="$LIB" "$VENV/bin/python" "$TMP/load.py" "$LIB"; then
  echo "test-torch: ok: torch loads with Theseus preloaded and Theseus answers torch.cuda.nccl.version()"
else
  echo "test-torch: FAIL: torch with Theseus preloaded"; fail=1
fi
exit $fail
