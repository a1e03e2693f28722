// What the common driver needs to know about one collective: the element
// counts for a size, the bandwidth formulas, how to call it and what every
// rank's output must contain. One implementation per collective lives in
// nccl-tests-compat/collectives/<name>_perf.cc.
#pragma once

#include <cstddef>
#include <vector>

#include "nccl.h"
#include "perf_status.h"
#include "perf_verify.h"

namespace theseus::perf {

// nccl-tests' getCollByteCount, in elements. In-place runs use
// sendbuff = recvbuff + sendInplaceOffset*rank and recvbuff + recvInplaceOffset*rank.
struct CollCounts {
  size_t sendCount = 0;
  size_t recvCount = 0;
  size_t paramCount = 0;  // the count argument of the NCCL call (the "count" column)
  size_t sendInplaceOffset = 0;
  size_t recvInplaceOffset = 0;
};

struct CollCall {
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;
  int rank = 0;
  int nranks = 1;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

class CollectiveTest {
 public:
  virtual ~CollectiveTest() = default;

  virtual const char* program() const = 0;  // "all_reduce_perf"
  virtual bool usesOp() const { return false; }
  virtual bool usesRoot() const { return false; }
  // Rejects rank counts the collective cannot run with (hypercube: powers of two).
  virtual Status checkRanks(int nranks) const { return Status::ok(); }

  // `count` = size / element size.
  virtual CollCounts counts(size_t count, size_t eltSize, int nranks) const = 0;
  // algbw = bytes moved per rank / time (GB/s), busbw = algbw * the collective's factor.
  virtual void bandwidth(size_t paramCount, size_t eltSize, double seconds, int nranks, double* algBw,
                         double* busBw) const = 0;
  // Collectives made of dependent rounds (hypercube) issue one round per step;
  // the driver groups the same step of all ranks a thread drives, and never
  // merges steps into one group (a group's operations run concurrently).
  virtual int steps(int nranks) const { return 1; }
  // Issues step `step` of the operation (possibly several NCCL calls in a group).
  virtual ncclResult_t run(const CollCall& call, int step) const = 0;

  // False where NCCL leaves the receive buffer undefined (non-roots of reduce/gather).
  virtual bool hasOutput(int rank, int root) const { return true; }
  // False when the in-place form has no defined result: its half-row is timed
  // but not checked (#wrong N/A), as in nccl-tests.
  virtual bool checksInPlace() const { return true; }
  // The exact expected content of `rank`'s receive region (counts.recvCount elements).
  virtual void expected(const InputModel& inputs, int rank, int root, const CollCounts& counts,
                        void* out) const = 0;
};

// nccl-tests rounds per-rank counts of gathers/scatters down to 16-byte multiples.
size_t alignedPerRank(size_t count, size_t eltSize, int nranks);

// Every collective, for tests and tools.
const std::vector<const CollectiveTest*>& allCollectives();
const CollectiveTest* findCollective(const char* program);

// Defined by each collective's file.
const CollectiveTest& allReduceTest();
const CollectiveTest& allGatherTest();
const CollectiveTest& broadcastTest();
const CollectiveTest& reduceTest();
const CollectiveTest& reduceScatterTest();
const CollectiveTest& alltoallTest();
const CollectiveTest& gatherTest();
const CollectiveTest& scatterTest();
const CollectiveTest& sendrecvTest();
const CollectiveTest& hypercubeTest();

// The program entry point shared by every *_perf binary (perf_main.cc).
int perfMain(int argc, char** argv, const CollectiveTest& test);

}  // namespace theseus::perf
