// Internal to the verifier: the symbolic executor (verifier_sim.cc) and the
// contribution sets it moves around. Not for use outside src/schedule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "schedule/analysis.h"
#include "schedule/ir.h"

namespace theseus::schedule::verify {

// One contribution: chunk `chunk` of rank `rank`'s input.
struct Contribution {
  int rank;
  uint32_t chunk;
  bool operator<(const Contribution& o) const { return chunk != o.chunk ? chunk < o.chunk : rank < o.rank; }
  bool operator==(const Contribution&) const = default;
};

// A contribution set, stored compactly: for each input chunk index present
// (ascending), the index followed by a bitset of the ranks whose chunk it
// holds. A value usually comes from one chunk index, so it takes O(n/64)
// words, not O(n * chunks). Empty means "unwritten". The encoding is
// canonical, so equal sets compare equal as vectors.
using Value = std::vector<uint64_t>;

class ValueSpace {
 public:
  explicit ValueSpace(int nranks) : rankWords_((static_cast<size_t>(nranks) + 63) / 64) {}
  Value single(int rank, uint32_t chunk) const;
  Value allRanks(int nranks, uint32_t chunk) const;  // {(s, chunk) : s < nranks}
  std::vector<Contribution> list(const Value& v) const;
  // *into = *into (+) add; false, with the first shared contribution in *dup,
  // when a contribution would be counted twice.
  bool combine(Value* into, const Value& add, Contribution* dup) const;
  // "{r0:c5, r1:c5}" (long sets are abbreviated).
  std::string format(const Value& v) const;
  static std::string format(const Contribution& c);
  static std::string format(const std::vector<Contribution>& list);

 private:
  size_t rankWords_;
};

// A rank's memory: one value per chunk of each physical buffer.
struct RankMemory {
  std::vector<Value> buf[3];
};

// Messages matched statically: k-th send on (from, to, channel) <-> k-th receive.
struct Matching {
  std::vector<size_t> offset;          // first global step id of each rank
  std::vector<int64_t> receiverOf;     // sending step -> the step receiving its message (-1: not a send)
  std::vector<int64_t> senderOf;       // receiving step -> the step sending its message (-1: not a receive)
  size_t gid(int rank, uint32_t step) const { return offset[rank] + step; }
};

class Simulator {
 public:
  Simulator(const Program& p, const std::vector<RankPlan>& plans, const Matching& match);
  // Runs every step that can run; semantic errors (unwritten reads, double
  // counts) end it early. Then: all complete, or a deadlock report.
  Status run();
  // Value held by logical chunk `chunk` of `b` on `rank` after run().
  const Value& valueAt(int rank, Buf b, uint32_t chunk) const;
  const ValueSpace& space() const { return space_; }

 private:
  enum : uint8_t { kStarted = 1, kRecvDone = 2, kSendDone = 4, kComplete = 8 };

  void poke(size_t g) { work_.push_back(g); }
  Status advance(size_t g);
  Status tryTransfer(size_t s);
  Status startStep(size_t g);
  Status complete(size_t g);
  bool sendReady(size_t s) const;
  bool recvReady(size_t k) const;
  // Reads a logical range (one value per chunk), failing on unwritten chunks.
  Status read(size_t g, const ChunkRange& r, std::vector<Value>* out) const;
  void write(size_t g, const ChunkRange& r, const std::vector<Value>& v);
  // out (+)= add chunk by chunk, failing when a contribution would count twice.
  Status combine(size_t g, const ChunkRange& where, std::vector<Value>* out, const std::vector<Value>& add) const;
  Status receive(size_t k, const std::vector<Value>& message);
  Status runLocal(size_t g);
  Status deadlockReport() const;
  // What keeps blocked step g from progressing: the step it waits on and why.
  size_t blocker(size_t g, std::string* why) const;
  Status stepError(size_t g, const std::string& text) const;

  const Program& p_;
  const std::vector<RankPlan>& plans_;
  const Matching& match_;
  ValueSpace space_;
  std::vector<RankMemory> mem_;
  std::vector<int> rankOf_;
  std::vector<uint8_t> state_;
  std::vector<uint32_t> pending_;
  std::vector<int64_t> nextRecv_, nextSend_;   // next step of the same rank in the same stream
  std::vector<std::vector<Value>> outgoing_;  // fused steps: what they will send
  std::vector<size_t> work_;
};

}  // namespace theseus::schedule::verify
