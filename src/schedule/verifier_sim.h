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

// Contribution sets as fixed-width bitsets: bit (s * inputChunks + j) is chunk
// j of rank s's input. All-zero means "unwritten".
class ValueSpace {
 public:
  ValueSpace(int nranks, uint32_t inputChunks)
      : inputChunks_(inputChunks), words_((static_cast<size_t>(nranks) * inputChunks + 63) / 64) {}
  size_t words() const { return words_; }
  uint32_t id(int rank, uint32_t chunk) const { return static_cast<uint32_t>(rank) * inputChunks_ + chunk; }
  // "{r0:c5, r1:c5}" (long sets are abbreviated).
  std::string format(const uint64_t* v) const;
  std::string formatId(uint32_t id) const;
  static bool empty(const uint64_t* v, size_t words);

 private:
  uint32_t inputChunks_;
  size_t words_;
};

// A rank's memory: one value per chunk of each physical buffer.
struct RankMemory {
  std::vector<uint64_t> buf[3];
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
  const uint64_t* valueAt(int rank, Buf b, uint32_t chunk) const;
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
  // Reads a logical range into `out` (count * words), failing on unwritten chunks.
  Status read(size_t g, const ChunkRange& r, std::vector<uint64_t>* out) const;
  void write(size_t g, const ChunkRange& r, const std::vector<uint64_t>& v);
  // out |= add, failing when they share a contribution.
  Status combine(size_t g, const ChunkRange& where, std::vector<uint64_t>* out, const std::vector<uint64_t>& add) const;
  Status receive(size_t k, const std::vector<uint64_t>& message);
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
  std::vector<std::vector<uint64_t>> outgoing_;  // fused steps: what they will send
  std::vector<size_t> work_;
};

}  // namespace theseus::schedule::verify
