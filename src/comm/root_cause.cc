#include "comm/root_cause.h"

#include <chrono>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/proc_stat.h"

namespace theseus::comm {
namespace {

// What the processes of this host's other ranks are doing, for a stall.
std::string stallDiagnosis(const bootstrap::Bootstrap& boot) {
  const auto& peers = boot.peers();
  const int me = boot.rank();
  if (me < 0 || me >= static_cast<int>(peers.size())) return "";
  std::string odd;
  for (const auto& p : peers) {
    if (p.rank == me || p.hostHash != peers[static_cast<size_t>(me)].hostHash || p.pid <= 0) continue;
    char state = 0;
    uint64_t start = 0;
    const char* what = nullptr;
    if (!readProcStat(p.pid, &state, &start) || state == 'Z' || state == 'X') what = "has exited";
    else if (state == 'T') what = "is stopped (SIGSTOP?)";
    else if (state == 't') what = "is stopped by a debugger";
    if (what == nullptr) continue;
    odd += std::string(odd.empty() ? "" : ", ") + "rank " + std::to_string(p.rank) + " (pid " + std::to_string(p.pid) +
           ") " + what;
  }
  if (!odd.empty()) return "; no peer is known to have failed, but on this host " + odd;
  return "; no peer is known to have failed and the ranks on this host are running: a rank elsewhere is stuck or "
         "slow, or the ranks did not call the same operations";
}

}  // namespace

std::string whoIs(const bootstrap::Bootstrap& boot, int r) {
  const auto& peers = boot.peers();
  if (r < 0 || r >= static_cast<int>(peers.size())) return "?";
  const int parent = boot.parentRankOf(r);
  return (parent >= 0 ? "parent rank " + std::to_string(parent) + ", " : std::string()) +
         peers[static_cast<size_t>(r)].hostname + " pid " + std::to_string(peers[static_cast<size_t>(r)].pid);
}

Status withRootCause(const bootstrap::Bootstrap& boot, const Status& s) {
  if (s.code() != ncclRemoteError && s.code() != ncclSystemError && s.code() != ncclTimeout) return s;
  if (s.message().find(" failed first") != std::string::npos) return s;  // a peer's report already says it
  std::vector<int> failed = boot.failedRanks();
  for (Deadline d = Deadline::afterMs(300); failed.empty() && !d.expired(); failed = boot.failedRanks())
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (failed.empty()) return s.code() == ncclTimeout ? Status(s.code(), s.message() + stallDiagnosis(boot)) : s;
  std::string cause = "rank " + std::to_string(failed.front()) + " (" + whoIs(boot, failed.front()) + ") failed first";
  if (failed.size() > 1) {
    cause += " (then rank";
    for (size_t i = 1; i < failed.size(); ++i) cause += (i > 1 ? ", " : " ") + std::to_string(failed[i]);
    cause += ")";
  }
  return Status(s.code(), cause + "; here: " + s.message());
}

}  // namespace theseus::comm
