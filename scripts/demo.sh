#!/usr/bin/env bash
# `make run`: four real rank processes of tools/theseus-init-demo create a
# communicator, split it into even and odd ranks, print rank/size/device of
# each, and destroy them. Launched with theseus-run when it was built,
# otherwise by this script (NCCL_COMM_ID on a free loopback port).
#   scripts/demo.sh [build-dir] [nranks]
set -euo pipefail
build=${1:-build}
nranks=${2:-4}
demo="$build/bin/theseus-init-demo"
if [[ ! -x "$demo" ]]; then
  echo "demo.sh: $demo is missing; build first (make build)" >&2
  exit 1
fi
timeout_s=60

if [[ -x "$build/bin/theseus-run" ]]; then
  echo "== theseus-run -np $nranks -- $demo"
  exec "$build/bin/theseus-run" -np "$nranks" --timeout "$timeout_s" -- "$demo"
fi

# No launcher: start the ranks here.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
       echo $((20000 + RANDOM % 20000)))
echo "== $nranks ranks of $demo, NCCL_COMM_ID=127.0.0.1:$port"
pids=()
for ((r = 0; r < nranks; r++)); do
  THESEUS_RANK=$r THESEUS_NRANKS=$nranks NCCL_COMM_ID=127.0.0.1:$port timeout "$timeout_s" "$demo" &
  pids+=($!)
done
status=0
for ((r = 0; r < nranks; r++)); do
  if ! wait "${pids[$r]}"; then
    echo "demo.sh: rank $r failed" >&2
    status=1
  fi
done
[[ $status == 0 ]] && echo "== demo finished: all $nranks ranks succeeded"
exit $status
