// An in-process stand-in for the real Bootstrap, so the transports are tested
// without it. Ranks are threads of the test or processes forked from it:
//  * allGather/barrier go through an anonymous MAP_SHARED block created before
//    the ranks start (a generation-counting barrier plus double-buffered
//    contribution slots);
//  * connectTo/acceptFrom use real loopback TCP: every rank's listen socket is
//    created up front, so connectTo completes from the kernel's backlog without
//    the peer's code running; acceptFrom parks connections that arrive for
//    other (peer, tag) pairs until someone asks for them.
// Each rank may be given its own host hash to emulate several hosts.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.h"

namespace theseus::testing {

class FakeWorld {
 public:
  // `hostHashes`: one per rank (default: all ranks on one host).
  static std::unique_ptr<FakeWorld> create(int nranks, std::vector<uint64_t> hostHashes = {});
  ~FakeWorld();

  int nranks() const { return nranks_; }
  // The bootstrap of `rank`; call it in the rank's own thread or process.
  std::unique_ptr<bootstrap::Bootstrap> bootstrap(int rank);

  struct Shared;  // the MAP_SHARED block

 private:
  FakeWorld() = default;
  int nranks_ = 0;
  uint64_t commHash_ = 0;
  std::vector<uint64_t> hostHashes_;
  std::vector<int> listenFds_;
  std::vector<int> ports_;
  Shared* shared_ = nullptr;
  size_t sharedBytes_ = 0;
  friend class FakeBootstrap;
};

// Runs fn(rank) on `nranks` threads and joins them.
void runThreads(int nranks, const std::function<void(int rank)>& fn);

// Runs fn(rank) in `nranks` forked processes; returns their exit codes
// (fn's return value; 128+signal when killed; -1 when killed at the timeout).
std::vector<int> runProcesses(int nranks, const std::function<int(int rank)>& fn, int timeoutSec = 60);

// Sets an environment variable for the lifetime of the guard.
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value);
  ~EnvGuard();

 private:
  std::string name_;
  bool had_ = false;
  std::string old_;
};

}  // namespace theseus::testing
