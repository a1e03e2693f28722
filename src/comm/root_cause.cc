#include "comm/root_cause.h"

#include <chrono>
#include <thread>
#include <vector>

#include "common/deadline.h"

namespace theseus::comm {

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
  if (failed.empty()) return s;
  std::string cause = "rank " + std::to_string(failed.front()) + " (" + whoIs(boot, failed.front()) + ") failed first";
  if (failed.size() > 1) {
    cause += " (then rank";
    for (size_t i = 1; i < failed.size(); ++i) cause += (i > 1 ? ", " : " ") + std::to_string(failed[i]);
    cause += ")";
  }
  return Status(s.code(), cause + "; here: " + s.message());
}

}  // namespace theseus::comm
