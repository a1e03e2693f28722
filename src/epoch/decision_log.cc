#include "epoch/decision_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "common/knobs.h"
#include "common/log.h"
#include "common/path_template.h"

namespace theseus::epoch {
namespace {

const StringKnob kDecisionLog("THESEUS_DECISION_LOG", nullptr,
                              "Write each communicator's decision log (every decision table that took effect and the "
                              "collective at which it did, one JSON object per line) to this file; %r = rank, "
                              "%p = pid, %c = communicator hash");

std::string hex(uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

// Paths this process opened already (the first opener truncates).
bool firstOpen(const std::string& path) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  return seen.insert(path).second;
}

}  // namespace

std::string DecisionLog::configuredPath(int rank, uint64_t commHash) {
  return expandPathTemplate(kDecisionLog.get(), rank, commHash);
}

DecisionLog::DecisionLog(uint64_t commHash, int rank) : commHash_(commHash), path_(configuredPath(rank, commHash)) {
  if (path_.empty()) return;
  int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (firstOpen(path_) ? O_TRUNC : 0);
  fd_ = open(path_.c_str(), flags, 0644);
  if (fd_ < 0)
    TH_WARN("THESEUS_DECISION_LOG: cannot open %s: %s; the decision log stays in memory only", path_.c_str(),
            strerror(errno));
}

DecisionLog::~DecisionLog() {
  flush();
  if (fd_ >= 0) close(fd_);
}

std::string DecisionLog::formatBody(uint64_t version, const std::string& reason, const policy::DecisionTable& table) {
  nlohmann::json ranges = nlohmann::json::array();
  for (int c = 0; c < policy::DecisionTable::kCollectives; ++c) {
    auto coll = static_cast<schedule::Collective>(c);
    for (const auto& r : table.ranges(coll)) {
      ranges.push_back({{"collective", schedule::collectiveName(coll)},
                        {"min", r.minBytes},
                        {"max", r.maxBytes},
                        {"schedule", r.decision.schedule},
                        {"params", r.decision.params.toString()},
                        {"slice", r.decision.sliceBytes}});
    }
  }
  // "seq" is inserted in front when the table takes effect.
  nlohmann::json body = {{"version", version}, {"reason", reason}, {"table", ranges}};
  if (!table.nicChoices().empty()) {  // ranks whose traffic leaves their own NIC port
    nlohmann::json nics = nlohmann::json::array();
    for (const policy::NicChoice& n : table.nicChoices())
      nics.push_back({{"rank", n.rank}, {"move", policy::NicChoice::moveName(n.move)}, {"why", n.why}});
    body["nics"] = nics;
  }
  std::string text = body.dump();
  return text.substr(1);  // without the opening brace
}

std::string DecisionLog::formatCaptured(uint64_t version, const char* collective, const char* schedule, size_t bytes) {
  nlohmann::json body = {
      {"captured", {{"collective", collective}, {"schedule", schedule}, {"bytes", bytes}, {"version", version}}}};
  return body.dump().substr(1);  // without the opening brace, as formatBody
}

void DecisionLog::record(uint64_t seq, std::shared_ptr<const std::string> body) {
  std::lock_guard<std::mutex> lock(mu_);
  queued_.push_back(Queued{seq, std::move(body)});
}

void DecisionLog::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  flushLocked();
}

void DecisionLog::flushLocked() const {
  for (; !queued_.empty(); queued_.pop_front()) {
    const Queued& q = queued_.front();
    std::string line = "{\"comm\":\"" + hex(commHash_) + "\",\"seq\":" + std::to_string(q.seq) + "," +
                       (q.body ? *q.body : std::string("}")) + "\n";
    if (fd_ >= 0) {
      ssize_t n = write(fd_, line.data(), line.size());
      if (n != static_cast<ssize_t>(line.size())) {
        TH_WARN("THESEUS_DECISION_LOG: writing %s failed: %s; further lines stay in memory only", path_.c_str(),
                n < 0 ? strerror(errno) : "short write");
        close(fd_);
        fd_ = -1;
      }
    }
    bytes_ += line.size();
    lines_.push_back(std::move(line));
    while (lines_.size() > 1 && (lines_.size() > kMaxLines || bytes_ > kMaxBytes)) {
      bytes_ -= lines_.front().size();
      lines_.pop_front();
      ++dropped_;
    }
  }
}

std::string DecisionLog::text() const {
  std::lock_guard<std::mutex> lock(mu_);
  flushLocked();
  std::string out;
  for (const auto& l : lines_) out += l;
  return out;
}

size_t DecisionLog::lines() const {
  std::lock_guard<std::mutex> lock(mu_);
  flushLocked();
  return lines_.size() + dropped_;
}

}  // namespace theseus::epoch
