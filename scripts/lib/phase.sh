# Time-boxed phases for the hardware checks (gpu-check.sh, rdma-check.sh): sourced after
# LOG_DIR is set. phase NAME SECONDS COMMAND... runs the command with its output in
# $LOG_DIR/NAME.log, shows the log's tail, and adds a line to SUMMARY.
declare -a SUMMARY

phase() {  # name, timeout seconds, command...
  local name=$1 limit=$2
  shift 2
  echo "=== $name"
  local start=$SECONDS
  timeout "$limit" "$@" > "$LOG_DIR/$name.log" 2>&1
  local rc=$?
  tail -n 40 "$LOG_DIR/$name.log"
  SUMMARY+=("$(printf '%-16s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - start))")")
  return $rc
}
