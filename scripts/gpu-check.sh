#!/usr/bin/env bash
# GPU check, run in one go on a machine with an NVIDIA GPU (see README and docs/cuda-executor.md):
#   1. build with CUDA (build-gpu/), only the targets the check needs;
#   2. the GPU tests (CUDA driver leaf, device buffers through the staging and the CUDA executor, CUDA graph capture
#      and replay with the 8 B allreduce latency eager and replayed);
#   3. the harness on device buffers, -c 1, every collective and datatype, 1, 2 and 4 ranks on GPU 0, through the
#      staging executor (default) and the CUDA executor (THESEUS_DEVICE_EXECUTOR=cuda); then the CUDA executor
#      between two network-namespace hosts (its FIFOs proxied over TCP), when run as root; two processes' FIFO
#      payload slots in GPU memory through CUDA IPC; registered buffers read in place by the peer (zero-copy);
#   4. the device-to-device cudaMemcpy roofline and 256 MiB bf16 allreduce/allgather/reduce-scatter busbw next to it
#      (staging, CUDA executor, CUDA executor with its FIFO slots in host memory: NCCL_P2P_DISABLE=1, CUDA executor
#      with the buffers registered: -R 1, zero-copy reads);
#   5. a PyTorch smoke test: torch.distributed with the NCCL backend, our libnccl.so.2 via LD_PRELOAD.
# Every phase is time-boxed; a summary line per phase ends the output. Output also goes to $OUT/ when set.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc)}
LOG_DIR=${OUT:-$BUILD}
mkdir -p "$LOG_DIR"
source scripts/lib/phase.sh

echo "=== environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -4
nvcc --version 2>/dev/null | tail -1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" 2>&1 | tail -1

if [[ ${THESEUS_GPU_PREBUILT:-0} == 1 && -x $BUILD/bin/gpu_device_buffers_test && -x $BUILD/bin/device_cuda_driver_test ]]; then
  echo "=== build: using the prebuilt $BUILD (THESEUS_GPU_PREBUILT=1)"
  export LD_LIBRARY_PATH="$PWD/$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # its RUNPATH is the build machine's
  build_ok=0
else
phase build 420 bash -c "cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=Release -DTHESEUS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DTHESEUS_SKIP_TEST_DIRS='mp/collectives|schedule_user|mp/user_schedules|bench' >/dev/null && \
  cmake --build $BUILD -j $JOBS --target nccl theseus-run all_reduce_perf all_gather_perf sendrecv_perf \
    gpu_device_buffers_test device_cuda_driver_test d2d_bandwidth reduce_perf broadcast_perf reduce_scatter_perf \
    alltoall_perf gather_perf scatter_perf"
build_ok=$?
fi

if [[ $build_ok -eq 0 ]]; then
  phase gpu-tests 150 bash -c "$BUILD/bin/device_cuda_driver_test && $BUILD/bin/gpu_device_buffers_test"
  # The capture-and-replay test prints the 8 B allreduce latency, eager and graph-replayed (targets: 10 and 5 us).
  MEASURED=$(grep -h '^\[capture_replay\]' "$LOG_DIR/gpu-tests.log")
  # Every collective and datatype with results checked, on 1, 2 and 4 ranks of GPU 0, with both device paths.
  matrix() {  # executor
    local exe=$1 n coll
    for n in 1 2 4; do
      for coll in all_reduce all_gather reduce_scatter broadcast reduce alltoall gather scatter sendrecv; do
        env THESEUS_DEVICE_EXECUTOR=$exe $BUILD/bin/theseus-run -np $n --timeout 60 -- \
          $BUILD/bin/${coll}_perf -b 8 -e 1M -f 32 -d all -c 1 -n 2 -w 1 > "$LOG_DIR/matrix-$exe-$coll-$n.log" 2>&1 ||
          { echo "FAILED: $exe $coll -np $n"; tail -n 20 "$LOG_DIR/matrix-$exe-$coll-$n.log"; return 1; }
        grep -q "Out of bounds values : 0 OK" "$LOG_DIR/matrix-$exe-$coll-$n.log" ||
          { echo "WRONG RESULTS: $exe $coll -np $n"; return 1; }
      done
    done
    echo "every collective and datatype correct on 1, 2, 4 ranks ($exe)"
  }
  export -f matrix
  export BUILD LOG_DIR
  phase harness-staging 150 bash -c "matrix off"
  phase harness-cuda 150 bash -c "matrix cuda"
  # Two processes on GPU 0 put their device FIFOs' payload slots in each other's GPU memory (CUDA IPC).
  phase device-slots 60 bash -c "THESEUS_DEVICE_EXECUTOR=cuda NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT \
    $BUILD/bin/theseus-run -np 2 --timeout 60 -- $BUILD/bin/all_reduce_perf -b 8 -e 64M -f 64 -c 1 -n 2 -w 1 \
    > $LOG_DIR/device-slots.log 2>&1 && grep -q 'slots in GPU memory with 1' $LOG_DIR/device-slots.log &&
    grep -q 'Out of bounds values : 0 OK' $LOG_DIR/device-slots.log && echo 'payload slots in GPU memory (CUDA IPC)'"
  # Registered buffers: each peer's kernel reads them in place through CUDA IPC (zero-copy), every result checked.
  phase zero-copy 90 bash -c "for coll in all_reduce all_gather reduce_scatter sendrecv alltoall; do
      THESEUS_DEVICE_EXECUTOR=cuda NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=REG $BUILD/bin/theseus-run -np 2 --timeout 60 -- \
        $BUILD/bin/\${coll}_perf -b 8 -e 64M -f 64 -d all -c 1 -n 2 -w 1 -R 1 > $LOG_DIR/zero-copy-\$coll.log 2>&1
      grep -q 'Out of bounds values : 0 OK' $LOG_DIR/zero-copy-\$coll.log || { echo \"WRONG RESULTS: \$coll\"; exit 1; }
      grep -q 'in place from its registered device buffers' $LOG_DIR/zero-copy-\$coll.log ||
        { echo \"NO ZERO-COPY: \$coll\"; exit 1; }
    done; echo 'registered buffers read in place (CUDA IPC), results correct'"
  # The CUDA executor to ranks on other "hosts" (network namespaces, root only): its FIFOs are proxied over TCP
  # (transport/fifo_proxy.h), the inter-node path of device buffers.
  if [[ $(id -u) == 0 ]] && command -v ip > /dev/null; then
    phase cuda-proxied 120 bash -c "for coll in all_reduce all_gather broadcast sendrecv; do
      THESEUS_DEVICE_EXECUTOR=cuda $BUILD/bin/theseus-run -np 2 --netns --timeout 60 -x THESEUS_DEVICE_EXECUTOR=cuda -- \
        $BUILD/bin/\${coll}_perf -b 8 -e 64M -f 64 -d float -c 1 -n 2 -w 1 | tee $LOG_DIR/proxied-\$coll.log | tail -3
      grep -q 'Out of bounds values : 0 OK' $LOG_DIR/proxied-\$coll.log || { echo \"WRONG RESULTS: \$coll\"; exit 1; }
    done"
  else
    SUMMARY+=("cuda-proxied   skipped: needs root for network namespaces")
  fi
  # The roofline and the large-message numbers, in the same run.
  phase roofline 150 bash -c "
    $BUILD/bin/d2d_bandwidth $((256 << 20)) &&
    for exe in off cuda cuda-hostslots cuda-registered; do for coll in all_reduce all_gather reduce_scatter sendrecv; do
      p2p=0; reg=0; [[ \$exe == cuda-hostslots ]] && p2p=1; [[ \$exe == cuda-registered ]] && reg=1
      THESEUS_DEVICE_EXECUTOR=\${exe%-*} NCCL_P2P_DISABLE=\$p2p $BUILD/bin/theseus-run -np 2 --timeout 60 -- $BUILD/bin/\${coll}_perf -b 256M -e 256M \
        -d bfloat16 -n 5 -w 2 -R \$reg | grep -E '^ +[0-9]+ ' | sed \"s/^/\$exe \$coll: /\"
    done; done"
  if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    phase torch-smoke 120 env LD_PRELOAD="$PWD/$BUILD/lib/libnccl.so.2" THESEUS_EXPECT_LIB="$PWD/$BUILD/lib" \
      python3 -m torch.distributed.run --nproc_per_node=2 --master_port=29517 scripts/torch_smoke.py
  else
    SUMMARY+=("torch-smoke    skipped: no PyTorch with CUDA")
  fi
fi

echo "=== summary"
printf '%s\n' "${SUMMARY[@]}"
[[ -n ${MEASURED:-} ]] && printf '%s\n' "$MEASURED"
for line in "${SUMMARY[@]}"; do [[ $line == *"rc=0 "* || $line == *skipped* ]] || exit 1; done
