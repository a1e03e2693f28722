// DecisionLog: per rank and communicator, every decision table that took
// effect and the collective at which it did — the evidence for invariant 1
// (same seq -> same schedule on every rank). Tests compare all ranks' logs;
// users read them through theseusGetDecisionLog() or THESEUS_DECISION_LOG.
//
// One JSON object per line, identical on every rank of a communicator:
//   {"comm":"<hash>","seq":E,"version":v,"reason":"...","table":[
//     {"collective":"allreduce","min":0,"max":32768,"schedule":"ring","params":"order=0,2,1,3","slice":0},...]}
// with "nics":[{"rank":r,"move":"other_nic"|"any","why":"..."}] when the table moves ranks' traffic
// off their NIC port (policy::NicChoice). A collective captured into a CUDA graph adds a line of its own:
//   {"comm":"<hash>","seq":S,"captured":{"collective":"allreduce","schedule":"ring","bytes":N,"version":v}}
// — every replay of the graph runs that schedule, whatever tables take effect later (docs/epochs.md).
// The body (everything but "seq") is formatted when the table is prepared, and
// installing it at its collective only queues (seq, body) — no formatting, no
// I/O on the application's thread: the epoch thread writes queued lines to the
// file on its next pass (and text() and the destructor flush them too).
//
// THESEUS_DECISION_LOG=path writes the lines to a file; "%r" in the path
// becomes the rank in the communicator, "%p" the pid, "%c" the communicator's
// hash. The first communicator of a process that opens a path truncates it;
// later ones (e.g. split communicators resolving to the same path) append.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "policy/decision_table.h"

namespace theseus::epoch {

class DecisionLog {
 public:
  // What stays in memory, for text(): the newest lines within both bounds (a table's line is a
  // few KB, and a job may swap often); THESEUS_DECISION_LOG's file has every line.
  static constexpr size_t kMaxLines = 10000;
  static constexpr size_t kMaxBytes = size_t{1} << 20;

  DecisionLog(uint64_t commHash, int rank);
  ~DecisionLog();
  DecisionLog(const DecisionLog&) = delete;
  DecisionLog& operator=(const DecisionLog&) = delete;

  // The line without its "seq" (see above).
  static std::string formatBody(uint64_t version, const std::string& reason, const policy::DecisionTable& table);
  // The line (without "seq") of a collective captured into a CUDA graph under table `version`.
  static std::string formatCaptured(uint64_t version, const char* collective, const char* schedule, size_t bytes);
  // Appends the line of a table that took effect at collective `seq` (queued; cheap).
  void record(uint64_t seq, std::shared_ptr<const std::string> body);
  void record(uint64_t seq, std::string body) { record(seq, std::make_shared<const std::string>(std::move(body))); }
  // Formats queued lines and writes them to the log file, if any.
  void flush();

  std::string text() const;  // all lines kept, each ending in '\n'
  size_t lines() const;
  const std::string& path() const { return path_; }

  // The THESEUS_DECISION_LOG path for a rank ("" when unset).
  static std::string configuredPath(int rank, uint64_t commHash);

 private:
  uint64_t commHash_;
  std::string path_;
  mutable int fd_ = -1;
  struct Queued {
    uint64_t seq;
    std::shared_ptr<const std::string> body;
  };
  void flushLocked() const;

  mutable std::mutex mu_;
  mutable std::deque<Queued> queued_;
  mutable std::deque<std::string> lines_;
  mutable size_t dropped_ = 0;
  mutable size_t bytes_ = 0;  // of lines_
};

}  // namespace theseus::epoch
