#!/usr/bin/env bash
# RDMA check, run in one go on a machine with an InfiniBand or RoCE HCA (docs/networks.md):
#   1. the HCAs and ports libibverbs sees (ibv_devinfo), and what Theseus' IB network makes of them;
#   2. build (build-rdma/, only what the check needs) unless THESEUS_RDMA_PREBUILT=1 and build-rdma exists;
#   3. the IB network's own tests against the libibverbs test double (as in CI), then on the real library:
#      2 and 4 ranks on this host with shared memory off (NCCL_SHM_DISABLE=1, NCCL_NET=IB), so every
#      pair goes through the HCA (QPs loop back through the port), the harness with -c 1 from 8 B to 1 GiB,
#      and allgather with and without ncclCommRegister'ed buffers (-R 1: zero-copy sends);
#   4. next to it, ib_write_bw (perftest) on the same port for 1 GiB messages when it is installed: the
#      issue's target is >= 90% of it for the harness's largest sends;
#   5. with RDMA_HOSTS=host1,host2 (ssh without a password, this tree at the same path): mpirun across them;
#   6. with two or more GPUs (the build then includes CUDA): GPUDirect RDMA sends and receives
#      (docs/cuda-executor.md) — the CUDA executor on 2 ranks, one GPU each, that count as two hosts
#      (NCCL_HOSTID), so their device FIFOs go through the proxy over the HCA: both directions in GPU
#      memory, receives only, none, and every receive flushed side by side, and the lines saying which
#      way the FIFOs went.
# Every phase is time-boxed; a summary line per phase ends the output. Output also goes to $OUT/ when set.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-rdma}
JOBS=${JOBS:-$(nproc)}
LOG_DIR=${OUT:-$BUILD}
mkdir -p "$LOG_DIR"
source scripts/lib/phase.sh

echo "=== environment"
if command -v ibv_devinfo > /dev/null; then ibv_devinfo 2>&1 | grep -E "hca_id|port:|state|link_layer|active_mtu" | head -40
else echo "ibv_devinfo not found (Debian: ibverbs-utils)"; fi

GPUS=0
if command -v nvidia-smi > /dev/null; then GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); fi
CUDA_FLAG=OFF
[[ $GPUS -ge 2 ]] && CUDA_FLAG=AUTO

if [[ ${THESEUS_RDMA_PREBUILT:-0} == 1 && -x $BUILD/bin/all_reduce_perf ]]; then
  echo "=== build: using the prebuilt $BUILD (THESEUS_RDMA_PREBUILT=1)"
else
  phase build 900 bash -c "cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=Release -DTHESEUS_CUDA=$CUDA_FLAG && \
    cmake --build $BUILD -j $JOBS --target nccl theseus-run all_reduce_perf all_gather_perf sendrecv_perf \
      ib_unit_test ib_network_test theseus_fake_ibverbs" || { printf '%s\n' "${SUMMARY[@]}"; exit 1; }
fi

phase double-tests 600 bash -c "cd $BUILD && ctest --output-on-failure -R '^ib_'"

# Real hardware: what Theseus sees, then the harness with every pair on the HCA.
RUN="$BUILD/bin/theseus-run"
NET_ENV=(-x NCCL_SHM_DISABLE=1 -x NCCL_NET=IB -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT,NET)
phase ib-devices 120 "$RUN" -np 2 "${NET_ENV[@]}" -- "$BUILD/bin/all_reduce_perf" -b 8 -e 8 -n 1 -w 0 -c 1
grep -hE "IB: (network device|not used)|through network 'IB'" "$LOG_DIR/ib-devices.log" | sort -u | head -10
for np in 2 4; do
  phase "allreduce-${np}r" 600 "$RUN" -np "$np" -x NCCL_SHM_DISABLE=1 -x NCCL_NET=IB -- \
    "$BUILD/bin/all_reduce_perf" -b 8 -e 1G -f 4 -c 1
  phase "sendrecv-${np}r" 600 "$RUN" -np "$np" -x NCCL_SHM_DISABLE=1 -x NCCL_NET=IB -- \
    "$BUILD/bin/sendrecv_perf" -b 8 -e 1G -f 4 -c 1
done
# Zero-copy from registered buffers against copying them (THESEUS_NET_ZERO_COPY, on for IB by default).
for reg in 0 1; do
  phase "registered-R${reg}" 600 "$RUN" -np 2 -x NCCL_SHM_DISABLE=1 -x NCCL_NET=IB -- \
    "$BUILD/bin/all_gather_perf" -b 1M -e 1G -f 8 -c 1 -R "$reg"
done
phase qps4-allgather 600 "$RUN" -np 2 -x NCCL_SHM_DISABLE=1 -x NCCL_NET=IB -x NCCL_IB_QPS_PER_CONNECTION=4 -- \
  "$BUILD/bin/all_gather_perf" -b 1M -e 1G -f 8 -c 1

if command -v ib_write_bw > /dev/null; then
  DEV=$(ibv_devinfo -l 2>/dev/null | sed -n 2p | tr -d ' \t')
  phase ib_write_bw 120 bash -c "ib_write_bw -d $DEV -s 1073741824 -n 20 --report_gbits > $LOG_DIR/ib_write_bw.server 2>&1 & \
    sleep 1; ib_write_bw -d $DEV -s 1073741824 -n 20 --report_gbits localhost; wait"
else
  echo "=== ib_write_bw not installed (Debian: perftest): no line-rate reference"
fi

if [[ -n ${RDMA_HOSTS:-} ]] && command -v mpirun > /dev/null; then
  phase multi-host 900 mpirun -H "$RDMA_HOSTS" -np 2 -x LD_LIBRARY_PATH="$PWD/$BUILD/lib" -x NCCL_NET=IB \
    "$BUILD/bin/all_reduce_perf" -b 8 -e 1G -f 4 -c 1
fi

# GPUDirect RDMA: two ranks, one GPU each, two hosts to Theseus, every device FIFO over the HCA. Four
# configurations side by side: both directions in GPU memory (the default), receives only
# (NCCL_NET_GDR_READ=0), none (NCCL_NET_GDR_LEVEL=LOC: the host-staged baseline), and every receive
# flushed (NCCL_NET_FORCE_FLUSH=1: what a GPU before Hopper costs).
if [[ $GPUS -ge 2 ]]; then
  for cfg in default NCCL_NET_GDR_READ=0 NCCL_NET_GDR_LEVEL=LOC NCCL_NET_FORCE_FLUSH=1; do
    env=()
    [[ $cfg != default ]] && env=(-x "$cfg")
    phase "gdr-$cfg" 600 "$RUN" -np 2 -x THESEUS_DEVICE_EXECUTOR=cuda -x NCCL_SHM_DISABLE=1 -x NCCL_NET=IB \
      "${env[@]}" -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT,NET,REG -- \
      bash -c 'NCCL_HOSTID=gdr-host-$THESEUS_RANK CUDA_VISIBLE_DEVICES=$THESEUS_RANK exec "$0" "$@"' \
      "$BUILD/bin/all_reduce_perf" -b 8 -e 1G -f 4 -c 1
    grep -hE "GPUDirect RDMA|through a proxy|no GPUDirect|landed in GPU memory" "$LOG_DIR/gdr-$cfg.log" |
      sed -E 's/[0-9]+ message/N message/; s/[0-9]+ landed/N landed/; s/[0-9]+ flushed/N flushed/' | sort | uniq -c | head -12
  done
else
  echo "=== GPUDirect RDMA: skipped ($GPUS GPU(s); two are needed, one per rank)"
fi

echo "=== summary"
printf '%s\n' "${SUMMARY[@]}"
for line in "${SUMMARY[@]}"; do [[ $line == *"rc=0 "* ]] || exit 1; done
