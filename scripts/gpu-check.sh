#!/usr/bin/env bash
# GPU check, run in one go on a machine with an NVIDIA GPU (see README and docs/cuda-executor.md):
#   1. build with CUDA (build-gpu/), only the targets the check needs (or THESEUS_GPU_PREBUILT=1: use a build-gpu
#      made elsewhere, e.g. carried to a device machine);
#   2. the GPU tests (CUDA driver leaf, device buffers through the staging and the CUDA executor, CUDA graph capture
#      and replay with the 8 B allreduce latency eager and replayed);
#   3. the device-to-device cudaMemcpy roofline and 256 MiB bf16 allreduce/allgather/reduce-scatter/sendrecv busbw
#      next to it (staging, CUDA executor, CUDA executor with its FIFO slots in host memory: NCCL_P2P_DISABLE=1,
#      CUDA executor with the buffers registered: -R 1, zero-copy reads; two processes, and two threads of one
#      process, whose kernels share a context and so run at the same time without MPS);
#   4. PyTorch: torch.distributed with the NCCL backend, our libnccl.so.2 via LD_PRELOAD (staging, and the CUDA
#      executor: the default), and a DDP training step timed with and without it (Theseus with its defaults);
#   5. the harness on device buffers, -c 1, every collective and datatype, 1, 2 and 4 ranks on GPU 0, through the
#      staging executor (THESEUS_DEVICE_EXECUTOR=off; in the background) and the CUDA executor (=cuda); two
#      processes' FIFO payload slots in GPU memory through CUDA IPC; registered buffers read in place by the peer
#      (zero-copy); then the CUDA executor between two network-namespace hosts (its FIFOs proxied over TCP), as root;
#   6. where MPS can be started (root, nvidia-cuda-mps-control): the 2-process CUDA executor numbers again under MPS.
# Every phase is time-boxed and the whole check keeps to THESEUS_GPU_CHECK_BUDGET seconds (480); a summary line per
# phase ends the output. The logs go to $BUILD/gpu-check-logs, and as one archive (plus the summary) to $OUT/ when
# set (a device machine returns only a few files).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc)}
LOG_DIR=$BUILD/gpu-check-logs
rm -rf "$LOG_DIR" && mkdir -p "$LOG_DIR"
source scripts/lib/phase.sh
PHASE_DEADLINE=$((SECONDS + ${THESEUS_GPU_CHECK_BUDGET:-480}))
RUN=$BUILD/bin/theseus-run

save_logs() {  # the archive and the summary into $OUT (a device machine's way back)
  [[ -n ${OUT:-} ]] || return 0
  tar czf "$OUT/gpu-check-logs.tgz" -C "$LOG_DIR" . 2> /dev/null
  { printf '%s\n' "${SUMMARY[@]}"; cat "$LOG_DIR"/*.bg-summary 2> /dev/null; printf '%s\n' "${MEASURED:-}"; } \
    > "$OUT/summary.txt"
}

echo "=== environment"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode --format=csv,noheader 2>&1 | head -4
  nvcc --version 2>/dev/null | tail -1
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" 2>&1 | tail -1
  echo "MPS control: $(command -v nvidia-cuda-mps-control || echo none); cores $(nproc); kernel $(uname -r)"
} | tee "$LOG_DIR/environment.log"

if [[ ${THESEUS_GPU_PREBUILT:-0} == 1 && -x $BUILD/bin/gpu_device_buffers_test && -x $BUILD/bin/device_cuda_driver_test ]]; then
  echo "=== build: using the prebuilt $BUILD (THESEUS_GPU_PREBUILT=1)"
  export LD_LIBRARY_PATH="$PWD/$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # its RUNPATH is the build machine's
  build_ok=0
else
phase build 420 bash -c "cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=Release -DTHESEUS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DTHESEUS_SKIP_TEST_DIRS='mp/collectives|schedule_user|mp/user_schedules|bench' >/dev/null && \
  cmake --build $BUILD -j $JOBS --target nccl theseus-run all_reduce_perf all_gather_perf sendrecv_perf \
    gpu_device_buffers_test theseus-doctor device_cuda_driver_test d2d_bandwidth capture_probe reduce_perf broadcast_perf reduce_scatter_perf \
    alltoall_perf gather_perf scatter_perf"
build_ok=$?
fi

# THESEUS_GPU_MPS=1: the whole check under MPS (started here, stopped at the end), so every phase's processes on
# the one GPU run their kernels side by side; otherwise only the mps phase uses it.
HAVE_MPS=0 MPS_ON=0
[[ $(id -u) == 0 ]] && command -v nvidia-cuda-mps-control > /dev/null && HAVE_MPS=1
export CUDA_MPS_PIPE_DIRECTORY=/tmp/theseus-mps CUDA_MPS_LOG_DIRECTORY=/tmp/theseus-mps-log
if [[ $HAVE_MPS == 1 && ${THESEUS_GPU_MPS:-0} == 1 ]]; then
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY && nvidia-cuda-mps-control -d && MPS_ON=1
  echo "MPS started for the whole check: $MPS_ON"
fi
export HAVE_MPS MPS_ON

if [[ $build_ok -eq 0 ]]; then
  export BUILD LOG_DIR RUN
  phase gpu-tests 150 bash -c "$BUILD/bin/capture_probe; $BUILD/bin/device_cuda_driver_test &&
    $BUILD/bin/gpu_device_buffers_test"
  # The capture-and-replay test prints the 8 B allreduce latency, eager and graph-replayed (targets: 10 and 5 us).
  MEASURED=$(grep -h '^\[capture_replay\]' "$LOG_DIR/gpu-tests.log")
  save_logs

  # The roofline and the large-message numbers, in the same run, before anything else loads the GPU. Without MPS
  # the kernels of two processes time-slice the GPU (each waits ~2.5 ms for its peer's slice: the first H200 run),
  # so two ranks run here as threads of one process (one context, kernels side by side); two processes run in the
  # mps phase below (or here, time-sliced, where MPS cannot start).
  # label executor P2P_DISABLE -R procs threads collectives extra-environment (comma-separated, - for none).
  # The cuda-1block and tuning rows run in the same script as the default rows, so their ratios compare: one
  # block per lane (as before channels got blocks of their own), 16 channels, 512 KiB slices (NCCL's simple
  # protocol geometry: 4 MiB per connection in 8 steps).
  phase roofline 150 bash -c "
    $BUILD/bin/d2d_bandwidth $((256 << 20)) &&
    while read -r label exe p2p reg np nt colls extra; do
      [[ \$np == 2 && \$exe == cuda && \$HAVE_MPS == 1 && \$MPS_ON == 0 ]] && continue
      [[ \$extra == - ]] && extra=
      for coll in \${colls//,/ }; do
      env \${extra//,/ } THESEUS_DEVICE_EXECUTOR=\$exe NCCL_P2P_DISABLE=\$p2p $RUN -np \$np --timeout 40 -- \
        $BUILD/bin/\${coll}_perf -b 256M -e 256M -d bfloat16 -n 5 -w 2 -R \$reg -t \$nt |
        grep -E '^ +[0-9]+ ' | sed \"s/^/\$label \$coll: /\"
    done; done <<< 'staging off 0 0 2 1 all_reduce,all_gather,reduce_scatter,sendrecv -
cuda-1rank cuda 0 0 1 1 all_reduce -
cuda-threads cuda 0 0 1 2 all_reduce,all_gather,reduce_scatter,sendrecv -
cuda-threads-registered cuda 0 1 1 2 all_reduce,all_gather,reduce_scatter,sendrecv -
cuda cuda 0 0 2 1 all_reduce,all_gather,reduce_scatter,sendrecv -
cuda-1block cuda 0 0 2 1 all_reduce THESEUS_DEVICE_BLOCKS=1
cuda-16ch cuda 0 0 2 1 all_reduce THESEUS_DEVICE_CHANNELS=16,THESEUS_MAX_CHANNELS=16
cuda-512k cuda 0 0 2 1 all_reduce THESEUS_SLICE_BYTES=524288,THESEUS_SHM_SLOT_BYTES=524288,THESEUS_SOCKET_SLOT_BYTES=524288
cuda-16ch-512k cuda 0 0 2 1 all_reduce THESEUS_DEVICE_CHANNELS=16,THESEUS_MAX_CHANNELS=16,THESEUS_SLICE_BYTES=524288,THESEUS_SHM_SLOT_BYTES=524288,THESEUS_SOCKET_SLOT_BYTES=524288
cuda-registered cuda 0 1 2 1 all_reduce,sendrecv -'"
  # One line for the summary: 256 MiB allreduce busbw (out of place) of each 2-process CUDA row, and how many
  # times the one-block row each is.
  MEASURED+=$'\n'$(awk '$2 == "all_reduce:" && $1 ~ /^cuda/ && $1 !~ /threads|1rank/ { bw[$1] = $10 }
    END { line = "[roofline] 256 MiB bf16 allreduce busbw, 2 processes (GB/s):"
          for (k in bw) line = line sprintf(" %s %s%s", k, bw[k], bw["cuda-1block"] > 0 ? sprintf(" (%.1fx)", bw[k] / bw["cuda-1block"]) : "")
          print line }' "$LOG_DIR/roofline.log" 2> /dev/null)
  save_logs

  if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    TORCHRUN="python3 -m torch.distributed.run --master_port=29517"
    PRELOAD="LD_PRELOAD=$PWD/$BUILD/lib/libnccl.so.2"
    phase torch-smoke 90 bash -c "
      env $PRELOAD THESEUS_EXPECT_LIB=$PWD/$BUILD/lib THESEUS_DEVICE_EXECUTOR=off $TORCHRUN --nproc_per_node=2 \
        scripts/torch_smoke.py &&
      env $PRELOAD THESEUS_EXPECT_LIB=$PWD/$BUILD/lib $TORCHRUN --nproc_per_node=2 scripts/torch_smoke.py"
    # World 1 compares the libraries (NVIDIA's refuses two ranks on one GPU); world 2 runs on Theseus alone.
    phase torch-ddp 120 bash -c "set -o pipefail
      $TORCHRUN --nproc_per_node=1 scripts/torch_ddp_step.py | sed 's/^/nvidia-nccl: /' &&
      env $PRELOAD $TORCHRUN --nproc_per_node=1 scripts/torch_ddp_step.py |
        sed 's/^/theseus cuda: /' &&
      env $PRELOAD $TORCHRUN --nproc_per_node=2 scripts/torch_ddp_step.py |
        sed 's/^/theseus cuda: /'"
    MEASURED+=$'\n'$(grep -h '\[ddp\]' "$LOG_DIR/torch-ddp.log")
  else
    SUMMARY+=("torch          skipped: no PyTorch with CUDA")
  fi
  save_logs

  # Every collective and datatype with results checked, on 1, 2 and 4 ranks of GPU 0, with both device paths.
  matrix() {  # executor
    local exe=$1 n coll
    for n in 1 2 4; do
      for coll in all_reduce all_gather reduce_scatter broadcast reduce alltoall gather scatter sendrecv; do
        env THESEUS_DEVICE_EXECUTOR=$exe $RUN -np $n --timeout 40 -- \
          $BUILD/bin/${coll}_perf -b 8 -e 1M -f 32 -d all -c 1 -n 2 -w 1 > "$LOG_DIR/matrix-$exe-$coll-$n.log" 2>&1 ||
          { echo "FAILED: $exe $coll -np $n"; tail -n 20 "$LOG_DIR/matrix-$exe-$coll-$n.log"; return 1; }
        grep -q "Out of bounds values : 0 OK" "$LOG_DIR/matrix-$exe-$coll-$n.log" ||
          { echo "WRONG RESULTS: $exe $coll -np $n"; return 1; }
      done
    done
    echo "every collective and datatype correct on 1, 2, 4 ranks ($exe)"
  }
  export -f matrix phase
  # The staging path barely uses the GPU: it runs beside the CUDA executor's phases.
  (phase harness-staging 200 bash -c "matrix off" > /dev/null; mv "$LOG_DIR/harness-staging.summary" \
    "$LOG_DIR/harness-staging.bg-summary") &
  staging_pid=$!
  phase harness-cuda 150 bash -c "matrix cuda"
  save_logs
  # Two processes on GPU 0 put their device FIFOs' payload slots in each other's GPU memory (CUDA IPC).
  phase device-slots 45 bash -c "THESEUS_DEVICE_EXECUTOR=cuda NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT \
    $RUN -np 2 --timeout 40 -- $BUILD/bin/all_reduce_perf -b 8 -e 64M -f 64 -c 1 -n 2 -w 1 \
    > $LOG_DIR/device-slots-run.log 2>&1 && grep -q 'slots in GPU memory with 1' $LOG_DIR/device-slots-run.log &&
    grep -q 'Out of bounds values : 0 OK' $LOG_DIR/device-slots-run.log && echo 'payload slots in GPU memory (CUDA IPC)'"
  # Registered buffers: each peer's kernel reads them in place through CUDA IPC (zero-copy), every result checked.
  phase zero-copy 75 bash -c "for coll in all_reduce all_gather reduce_scatter sendrecv alltoall; do
      THESEUS_DEVICE_EXECUTOR=cuda NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=REG $RUN -np 2 --timeout 40 -- \
        $BUILD/bin/\${coll}_perf -b 8 -e 64M -f 64 -d all -c 1 -n 2 -w 1 -R 1 > $LOG_DIR/zero-copy-\$coll.log 2>&1
      grep -q 'Out of bounds values : 0 OK' $LOG_DIR/zero-copy-\$coll.log || { echo \"WRONG RESULTS: \$coll\"; exit 1; }
      grep -q 'in place from its registered device buffers' $LOG_DIR/zero-copy-\$coll.log ||
        { echo \"NO ZERO-COPY: \$coll\"; exit 1; }
    done; echo 'registered buffers read in place (CUDA IPC), results correct'"
  save_logs
  # The CUDA executor to ranks on other "hosts" (network namespaces, root only): its FIFOs are proxied over TCP
  # (transport/fifo_proxy.h), the inter-node path of device buffers.
  if [[ $(id -u) == 0 ]] && command -v ip > /dev/null; then
    phase cuda-proxied 60 bash -c "for coll in all_reduce all_gather broadcast sendrecv; do
      THESEUS_DEVICE_EXECUTOR=cuda $RUN -np 2 --netns --timeout 40 -x THESEUS_DEVICE_EXECUTOR=cuda -- \
        $BUILD/bin/\${coll}_perf -b 8 -e 64M -f 64 -d float -c 1 -n 2 -w 1 | tee $LOG_DIR/proxied-\$coll.log | tail -3
      grep -q 'Out of bounds values : 0 OK' $LOG_DIR/proxied-\$coll.log || { echo \"WRONG RESULTS: \$coll\"; exit 1; }
    done"
  else
    SUMMARY+=("cuda-proxied   skipped: needs root for network namespaces")
  fi
  wait $staging_pid
  save_logs
  # Two processes under MPS: their kernels run side by side as they would on two GPUs' worth of SMs.
  if [[ $HAVE_MPS == 1 && $MPS_ON == 0 ]]; then
    phase mps 90 bash -c "mkdir -p \$CUDA_MPS_PIPE_DIRECTORY \$CUDA_MPS_LOG_DIRECTORY && nvidia-cuda-mps-control -d || exit 1
      THESEUS_DEVICE_EXECUTOR=cuda $RUN -np 2 --timeout 30 -- $BUILD/bin/all_reduce_perf -b 8 -e 8 -d float -n 200 -w 20 \
        | grep -E '^ +[0-9]+ ' | sed 's/^/mps cuda latency: /'
      while read -r label p2p reg colls; do for coll in \${colls//,/ }; do
        THESEUS_DEVICE_EXECUTOR=cuda NCCL_P2P_DISABLE=\$p2p $RUN -np 2 --timeout 30 -- $BUILD/bin/\${coll}_perf \
          -b 256M -e 256M -d bfloat16 -n 5 -w 2 -R \$reg | grep -E '^ +[0-9]+ ' | sed \"s/^/mps \$label \$coll: /\"
      done; done <<< 'cuda 0 0 all_reduce,all_gather,reduce_scatter,sendrecv
cuda-registered 0 1 all_reduce,all_gather,reduce_scatter,sendrecv
cuda-hostslots 1 0 all_reduce'
      echo quit | nvidia-cuda-mps-control"
  else
    SUMMARY+=("mps            skipped: needs root and nvidia-cuda-mps-control, or ran under MPS throughout")
  fi
fi
[[ $MPS_ON == 1 ]] && echo quit | nvidia-cuda-mps-control

echo "=== summary"
for f in "$LOG_DIR"/*.bg-summary; do [[ -f $f ]] && SUMMARY+=("$(cat "$f")"); done
printf '%s\n' "${SUMMARY[@]}"
[[ -n ${MEASURED:-} ]] && printf '%s\n' "$MEASURED"
rm -f "$LOG_DIR"/*.bg-summary
save_logs
for line in "${SUMMARY[@]}"; do [[ $line == *"rc=0 "* || $line == *skipped* ]] || exit 1; done
