#!/usr/bin/env bash
# GPU smoke check of the harness itself (CUDA buffers, streams, device-side
# data checking) against NVIDIA's NCCL, on a machine with one or more GPUs.
# Manual, not part of ctest (label-free): the CPU CI has no GPU.
#
#   cmake -S nccl-tests-compat -B build-ntc -DNCCL_HOME=/usr/local/cuda && cmake --build build-ntc
#   tests/harness/gpu_smoke.sh build-ntc/bin [outdir]
#
# With one GPU every run has one rank (NCCL refuses two ranks on one GPU,
# which the last check expects to be reported cleanly).
set -u
bin=${1:?usage: gpu_smoke.sh <dir with the *_perf binaries> [outdir]}
out=${2:-/tmp/gpu_smoke}
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
nvidia-smi -L 2>&1 | head -4
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c GPU)
failed=0
n=0

check() {  # expected-exit name args...
  local want=$1 name=$2
  shift 2
  n=$((n + 1))
  local log="$out/$n-$name.log" start=$SECONDS rc=0
  timeout 120 "$@" > "$log" 2>&1 || rc=$?
  if [[ $rc -eq $want ]]; then
    echo "ok   $name (exit $rc, $((SECONDS - start)) s): $(grep -E 'Out of bounds|Avg bus' "$log" | tr '\n' ' ')"
  else
    failed=$((failed + 1))
    echo "FAIL $name: exit $rc, wanted $want; last lines of $log:"
    tail -8 "$log" | sed 's/^/     /'
  fi
}

check 0 bandwidth "$bin/all_reduce_perf" -b 8 -e 1G -f 8 -n 20 -c 1 -J "$out/all_reduce.json"
for p in all_reduce reduce reduce_scatter; do
  check 0 "$p-all" "$bin/${p}_perf" -b 8 -e 4M -f 16 -n 3 -c 1 -d all -o all
done
for p in all_gather broadcast alltoall gather scatter sendrecv hypercube; do
  check 0 "$p-all" "$bin/${p}_perf" -b 8 -e 4M -f 16 -n 3 -c 1 -d all
done
check 0 cudamalloc "$bin/all_reduce_perf" -b 1M -e 4M -f 2 -c 2 --malloc -d half,bfloat16
check 0 unalign "$bin/all_reduce_perf" -b 1K -e 1M -f 32 -c 1 -u 3 -d int8,double
check 0 register "$bin/all_reduce_perf" -b 1K -e 1M -f 32 -c 1 -R 1
check 0 window "$bin/all_reduce_perf" -b 1K -e 1M -f 32 -c 1 -R 2
check 0 agg-blocking "$bin/all_reduce_perf" -b 1K -e 1M -f 32 -c 1 -m 4 -z 3 -y 1 -C 1 -T 30
check 0 threads-per-gpu "$bin/all_reduce_perf" -b 1K -e 1M -f 32 -c 1 -t "$ngpu" -g 1
if [[ $ngpu -eq 1 ]]; then
  check 2 two-ranks-one-gpu "$bin/all_reduce_perf" -b 1K -e 1K -g 2
fi
echo "gpu_smoke: $((n - failed))/$n passed; logs in $out"
[[ $failed -eq 0 ]]
