// Groups: deferral to the outermost end, per-communicator issue order,
// concurrency of jobs, non-blocking jobs, the blocking/non-blocking mixing
// rule, releases last, and ncclGroupSimulateEnd's checks. The collective
// engine is replaced by a recorder.
#include <latch>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "comm/group.h"
#include "comm/group_internal.h"
#include "comm/lifecycle_internal.h"

namespace theseus::comm {
namespace {

std::mutex gMu;
std::vector<std::vector<std::pair<Communicator*, std::vector<size_t>>>> gBatches;  // per executeOps call: comm -> counts
float gEstimate = 0;

Status recordOps(std::vector<CommOps>& work) {
  std::lock_guard<std::mutex> lock(gMu);
  std::vector<std::pair<Communicator*, std::vector<size_t>>> batch;
  for (auto& w : work) {
    std::vector<size_t> counts;
    for (auto& op : w.ops) counts.push_back(op.count);
    batch.emplace_back(w.comm, counts);
  }
  gBatches.push_back(batch);
  return Status::ok();
}

Status estimate(const std::vector<CommOps>& work, float* us) {
  size_t n = 0;
  for (auto& w : work) n += w.ops.size();
  *us = gEstimate * static_cast<float>(n);
  return Status::ok();
}

class GroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setOpsRunnersForTesting(recordOps, estimate);
    gBatches.clear();
  }
  void TearDown() override {
    setOpsRunnersForTesting(nullptr, nullptr);
    for (auto& st : made_) (void)reclaim(st, /*abort=*/false);
    EXPECT_EQ(groupDepth(), 0);
  }
  Communicator* comm(bool blocking = true) {
    CommConfig cfg;
    cfg.blocking = blocking;
    made_.push_back(newCommunicator(cfg));
    return made_.back()->comm;
  }
  static OpDesc op(size_t count) {
    OpDesc d;
    d.count = count;
    return d;
  }
  std::vector<std::shared_ptr<LifecycleState>> made_;
};

TEST_F(GroupTest, OutsideAGroupEachOpRunsAtOnce) {
  Communicator* a = comm();
  ASSERT_TRUE(enqueueOp(a, op(1)).isOk());
  ASSERT_TRUE(enqueueOp(a, op(2)).isOk());
  ASSERT_EQ(gBatches.size(), 2u);
  EXPECT_EQ(gBatches[1][0].second, std::vector<size_t>{2});
}

TEST_F(GroupTest, NestedGroupsDeferToTheOutermostEndInIssueOrder) {
  Communicator* a = comm();
  Communicator* b = comm();
  ASSERT_TRUE(groupStart().isOk());
  ASSERT_TRUE(enqueueOp(b, op(10)).isOk());
  ASSERT_TRUE(groupStart().isOk());
  EXPECT_EQ(groupDepth(), 2);
  ASSERT_TRUE(enqueueOp(a, op(1)).isOk());
  ASSERT_TRUE(enqueueOp(b, op(11)).isOk());
  ASSERT_TRUE(groupEnd().isOk());
  EXPECT_TRUE(gBatches.empty()) << "inner end runs nothing";
  ASSERT_TRUE(enqueueOp(a, op(2)).isOk());
  ASSERT_TRUE(groupEnd().isOk());
  ASSERT_EQ(gBatches.size(), 1u) << "one batch for all communicators";
  ASSERT_EQ(gBatches[0].size(), 2u);
  EXPECT_EQ(gBatches[0][0].first, b) << "communicators in order of first use";
  EXPECT_EQ(gBatches[0][0].second, (std::vector<size_t>{10, 11}));
  EXPECT_EQ(gBatches[0][1].second, (std::vector<size_t>{1, 2}));
}

TEST_F(GroupTest, EndWithoutStartIsInvalidUsage) {
  Status s = groupEnd();
  EXPECT_EQ(s.code(), ncclInvalidUsage);
  EXPECT_NE(s.message().find("without a matching ncclGroupStart"), std::string::npos);
}

TEST_F(GroupTest, JobsOfOneGroupRunConcurrently) {
  // Three jobs that each wait for the other two: they finish only if they run at the same time,
  // like several ranks of one communicator initialised from one thread.
  std::latch all(3);
  ASSERT_TRUE(groupStart().isOk());
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(enqueueJob(comm(), true, [&] {
      all.arrive_and_wait();
      return Status::ok();
    }).isOk());
  EXPECT_TRUE(groupEnd().isOk());
}

TEST_F(GroupTest, BlockingJobErrorsReachGroupEnd) {
  ASSERT_TRUE(groupStart().isOk());
  ASSERT_TRUE(enqueueJob(comm(), true, [] { return Status::ok(); }).isOk());
  ASSERT_TRUE(enqueueJob(comm(), true, [] { return remoteError("rank 3 never joined"); }).isOk());
  Status s = groupEnd();
  EXPECT_EQ(s.code(), ncclRemoteError);
  EXPECT_EQ(s.message(), "rank 3 never joined");
  // Outside a group a job runs at once and its error is the call's.
  EXPECT_EQ(enqueueJob(comm(), true, [] { return invalidUsage("x"); }).code(), ncclInvalidUsage);
}

TEST_F(GroupTest, NonBlockingJobsContinueInTheBackground) {
  std::latch release(1), done(1);
  Communicator* c = comm(false);
  Status s = enqueueJob(c, false, [&] {
    release.wait();
    done.count_down();
    return Status::ok();
  });
  EXPECT_EQ(s.code(), ncclInProgress) << "returns before the job finishes";
  release.count_down();
  done.wait();
}

TEST_F(GroupTest, MixingBlockingAndNonBlockingIsRefusedAndRunsNothing) {
  Communicator* blocking = comm(true);
  Communicator* nonBlocking = comm(false);
  bool ran = false;
  ASSERT_TRUE(groupStart().isOk());
  ASSERT_TRUE(enqueueOp(blocking, op(1)).isOk());
  ASSERT_TRUE(enqueueJob(nonBlocking, false, [&] {
    ran = true;
    return Status::ok();
  }).isOk());
  Status s = groupEnd();
  EXPECT_EQ(s.code(), ncclInvalidUsage);
  EXPECT_NE(s.message().find("mix blocking and non-blocking"), std::string::npos);
  EXPECT_FALSE(ran);
  EXPECT_TRUE(gBatches.empty());
  EXPECT_EQ(nonBlocking->lifecycle(), Lifecycle::kFailed) << "the communicator it was creating will never be ready";
  EXPECT_EQ(nonBlocking->asyncError(), ncclInvalidUsage);
}

TEST_F(GroupTest, ReleasesRunLastAndOpsOnAClosingCommAreRefused) {
  Communicator* a = comm();
  std::vector<std::string> order;
  ASSERT_TRUE(groupStart().isOk());
  ASSERT_TRUE(enqueueRelease(a, [&] {
    order.push_back("release");
    return Status::ok();
  }).isOk());
  ASSERT_TRUE(enqueueJob(comm(), true, [&] {
    order.push_back("job");
    return Status::ok();
  }).isOk());
  ASSERT_TRUE(enqueueOp(a, op(1)).isOk());
  ASSERT_TRUE(groupEnd().isOk());
  EXPECT_EQ(order, (std::vector<std::string>{"job", "release"}));
  ASSERT_EQ(gBatches.size(), 1u);

  a->lifecycleState()->closing.store(true);
  Status s = enqueueOp(a, op(1));
  EXPECT_EQ(s.code(), ncclInvalidUsage);
  a->lifecycleState()->closing.store(false);
  EXPECT_EQ(a->lifecycleState()->opsInFlight.load(), 0);
}

// An operation that waits until its communicator is aborted (like one whose peer never comes).
Status waitForAbort(std::vector<CommOps>& work) {
  auto end = Clock::now() + std::chrono::seconds(10);
  while (!work[0].comm->abortFlag().isSet() && Clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return work[0].comm->abortFlag().isSet() ? remoteError("aborted") : internalError("never aborted");
}

TEST_F(GroupTest, AbortEndsARunningOperationBeforeReleasing) {
  setOpsRunnersForTesting(waitForAbort, estimate);
  CommConfig cfg;
  auto st = newCommunicator(cfg);
  Status opStatus;
  std::thread worker([&] { opStatus = enqueueOp(st->comm, op(1)); });
  while (st->opsInFlight.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto t0 = Clock::now();
  EXPECT_TRUE(reclaim(st, /*abort=*/true).isOk());  // sets the flags, waits for the operation, releases
  EXPECT_EQ(st->opsInFlight.load(), 0);
  worker.join();
  EXPECT_EQ(opStatus.code(), ncclRemoteError);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
  EXPECT_FALSE(st->comm->handleIsValid());
  EXPECT_EQ(reclaim(st, false).code(), ncclInvalidArgument) << "a second release is refused";
}

TEST_F(GroupTest, SimulateEndChecksTheStructAndCopiesBackOnlyItsSize) {
  EXPECT_EQ(groupSimulateEnd(nullptr).code(), ncclInvalidArgument);
  ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
  bad.magic = 1;
  ASSERT_TRUE(groupStart().isOk());
  Status s = groupSimulateEnd(&bad);
  EXPECT_EQ(s.code(), ncclInvalidArgument);
  EXPECT_NE(s.message().find("NCCL_SIM_INFO_INITIALIZER"), std::string::npos);
  EXPECT_EQ(groupDepth(), 1) << "a rejected call leaves the group open";

  gEstimate = 12.5f;
  Communicator* a = comm();
  ASSERT_TRUE(enqueueOp(a, op(1)).isOk());
  ASSERT_TRUE(enqueueOp(a, op(2)).isOk());
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  ASSERT_TRUE(groupSimulateEnd(&info).isOk());
  EXPECT_FLOAT_EQ(info.estimatedTime, 25.0f);
  EXPECT_TRUE(gBatches.empty()) << "simulated operations do not run";
  EXPECT_EQ(groupDepth(), 0);

  // A caller whose struct ends before estimatedTime gets nothing written past its size.
  struct {
    ncclSimInfo_t info;
  } small;
  small.info = NCCL_SIM_INFO_INITIALIZER;
  small.info.size = offsetof(ncclSimInfo_t, estimatedTime);
  small.info.estimatedTime = -7.0f;
  ASSERT_TRUE(groupStart().isOk());
  ASSERT_TRUE(enqueueOp(a, op(1)).isOk());
  ASSERT_TRUE(groupSimulateEnd(&small.info).isOk());
  EXPECT_FLOAT_EQ(small.info.estimatedTime, -7.0f);

  // Nested: only the outermost end simulates.
  ASSERT_TRUE(groupStart().isOk());
  ASSERT_TRUE(groupStart().isOk());
  ncclSimInfo_t inner = NCCL_SIM_INFO_INITIALIZER;
  ASSERT_TRUE(groupSimulateEnd(&inner).isOk());
  EXPECT_EQ(groupDepth(), 1);
  ASSERT_TRUE(groupEnd().isOk());
  EXPECT_EQ(groupSimulateEnd(&inner).code(), ncclInvalidUsage) << "no open group";
}

}  // namespace
}  // namespace theseus::comm
