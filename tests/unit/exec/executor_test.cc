// Executor tests on the in-process fake transport: ranks are threads.
#include <gtest/gtest.h>

#include <thread>

#include "exec/executor.h"
#include "exec/rank_template.h"
#include "schedule/analysis.h"
#include "schedule/verifier.h"
#include "fake_transport.h"

namespace theseus::exec {
namespace {

using schedule::Buf;
using schedule::Op;
using testing::FakeFabric;

// Runs one plan per rank, each rank on its own thread; returns each rank's status.
std::vector<Status> runAll(std::vector<Plan>& plans, const ExecOptions& opts = {}) {
  std::vector<Status> out(plans.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < plans.size(); ++r) {
    threads.emplace_back([&, r] {
      std::vector<Lane> lanes(1);
      lanes[0].plans = {&plans[r]};
      out[r] = execute(lanes, opts);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

Plan basePlan(FakeFabric& f, int rank, size_t slice) {
  Plan p;
  p.rank = rank;
  p.transports = f.manager(rank);
  p.sliceBytes = slice;
  p.elemBytes = 4;
  p.tag = 77;
  p.opName = "test";
  p.chunked = false;
  p.rounds = 1;
  p.scheduleName = "handmade";
  return p;
}

// Gives a hand-built flat plan its connections (one per peer and direction, in step order).
void connect(Plan& p) {
  p.conns.clear();
  auto conn = [&](int peer, bool isSend, uint32_t* pos) {
    for (size_t c = 0; c < p.conns.size(); ++c)
      if (p.conns[c].peer == peer && p.conns[c].isSend == isSend) {
        *pos = p.conns[c].nsteps++;
        return static_cast<int32_t>(c);
      }
    PlanConn pc;
    pc.peer = peer;
    pc.isSend = isSend;
    pc.nsteps = 1;
    p.conns.push_back(pc);
    *pos = 0;
    return static_cast<int32_t>(p.conns.size() - 1);
  };
  for (uint32_t i = 0; i < p.steps.size(); ++i) {
    PlanStep& st = p.steps[i];
    st.index = i;
    if (st.sendPeer >= 0) st.outConn = conn(st.sendPeer, true, &st.outPos);
    if (st.recvPeer >= 0) st.inConn = conn(st.recvPeer, false, &st.inPos);
  }
}

PlanStep step(Op op, int recvPeer, int sendPeer, const void* src, void* dst, size_t bytes) {
  PlanStep s;
  s.op = op;
  s.recvPeer = recvPeer;
  s.sendPeer = sendPeer;
  s.src = static_cast<const char*>(src);
  s.dst = static_cast<char*>(dst);
  s.hasSrc = src != nullptr;
  s.hasDst = dst != nullptr;
  s.bytes = bytes;
  return s;
}

// Two ranks send each other 40 slices through 2-slot FIFOs at the same time:
// only works if sends and receives progress concurrently.
TEST(Executor, ConcurrentExchangeDoesNotDeadlock) {
  for (bool direct : {false, true}) {
    FakeFabric fabric(2, 2, 1024, direct);
    const size_t n = 40 * 1024 / 4;
    std::vector<std::vector<float>> in(2, std::vector<float>(n)), out(2, std::vector<float>(n, -1));
    for (int r = 0; r < 2; ++r)
      for (size_t i = 0; i < n; ++i) in[r][i] = float(r * 100000 + i);
    std::vector<Plan> plans;
    for (int r = 0; r < 2; ++r) {
      Plan p = basePlan(fabric, r, 1024);
      p.steps = {step(Op::kSend, -1, 1 - r, in[r].data(), nullptr, n * 4),
                 step(Op::kRecv, 1 - r, -1, nullptr, out[r].data(), n * 4)};
      connect(p);
      plans.push_back(std::move(p));
    }
    auto st = runAll(plans);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(st[r].isOk()) << st[r].message();
      EXPECT_EQ(out[r], in[1 - r]);
    }
  }
}

// A 3-rank ring allreduce written by hand in the IR, lowered through
// buildRankTemplate with sequential dependencies, run with a pre-multiplying
// reduction (each rank's input scaled once).
TEST(Executor, HandWrittenRingAllReduceWithPreMul) {
  const int n = 3;
  schedule::Program prog;
  prog.name = "hand-ring";
  prog.collective = schedule::Collective::kAllReduce;
  prog.nranks = n;
  prog.chunksPerBlock = n;
  prog.ranks.resize(n);
  for (int r = 0; r < n; ++r) {
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    auto& steps = prog.ranks[r].steps;
    auto chunk = [&](Buf b, int c) { return schedule::ChunkRange{b, uint32_t(((c % n) + n) % n), 1}; };
    schedule::Step s0;
    s0.op = Op::kSend;
    s0.sendPeer = next;
    s0.src = chunk(Buf::kInput, r);
    steps.push_back(s0);
    schedule::Step s1;  // reduce-scatter middle step
    s1.op = Op::kRecvReduceSend;
    s1.recvPeer = prev;
    s1.sendPeer = next;
    s1.src = chunk(Buf::kInput, r - 1);
    steps.push_back(s1);
    schedule::Step s2;  // final reduce of chunk r-2 (== r+1), forward
    s2.op = Op::kRecvReduceCopySend;
    s2.recvPeer = prev;
    s2.sendPeer = next;
    s2.src = chunk(Buf::kInput, r - 2);
    s2.dst = chunk(Buf::kOutput, r - 2);
    steps.push_back(s2);
    schedule::Step s3;  // allgather: forward chunk r-3 == r
    s3.op = Op::kRecvCopySend;
    s3.recvPeer = prev;
    s3.sendPeer = next;
    s3.dst = chunk(Buf::kOutput, r);
    steps.push_back(s3);
    schedule::Step s4;
    s4.op = Op::kRecv;
    s4.recvPeer = prev;
    s4.dst = chunk(Buf::kOutput, r - 1);
    steps.push_back(s4);
  }
  {
    Status v = schedule::verifyProgram(prog);
    ASSERT_TRUE(v.isOk()) << v.message();
  }
  const size_t count = 10001;  // not divisible by 3
  FakeFabric fabric(n, 3, 4096, true);
  std::vector<std::vector<float>> in(n, std::vector<float>(count)), out(n, std::vector<float>(count, 0));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) in[r][i] = float((i % 7) + r);
  Reduction red;
  red.kind = RedKind::kSum;
  red.type = ncclFloat32;
  red.preMul = true;
  red.scalar = 2.0;
  std::vector<std::unique_ptr<RankTemplate>> tmpls;
  std::vector<Plan> plans;
  for (int r = 0; r < n; ++r) {
    auto analysis = schedule::analyzeRank(prog, r);
    ASSERT_TRUE(analysis.isOk()) << analysis.status().message();
    auto t = buildRankTemplate(prog, r, analysis.value());
    ASSERT_TRUE(t.isOk()) << t.status().message();
    tmpls.push_back(t.take());
    Plan p = basePlan(fabric, r, 4096);
    p.reduction = red;
    p.sliceBytes = 4096;
    CallBuffers b;
    b.input = reinterpret_cast<const char*>(in[r].data());
    b.output = reinterpret_cast<char*>(out[r].data());
    b.unitElems = count;
    b.elemBytes = 4;
    lowerTemplate(*tmpls.back(), b, red, p);
    plans.push_back(std::move(p));
  }
  auto st = runAll(plans);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].isOk()) << st[r].message();
    for (size_t i = 0; i < count; ++i) {
      float want = 2.0f * float(3 * (i % 7) + 0 + 1 + 2);
      ASSERT_EQ(out[r][i], want) << "rank " << r << " element " << i;
    }
  }
}

TEST(Executor, MismatchedTagIsReported) {
  FakeFabric fabric(2, 4, 1024, false);
  std::vector<float> a(256, 1), b(256, 0);
  std::vector<Plan> plans;
  Plan p0 = basePlan(fabric, 0, 1024);
  p0.steps = {step(Op::kSend, -1, 1, a.data(), nullptr, 1024)};
  connect(p0);
  Plan p1 = basePlan(fabric, 1, 1024);
  p1.tag = 78;
  p1.steps = {step(Op::kRecv, 0, -1, nullptr, b.data(), 1024)};
  connect(p1);
  plans.push_back(std::move(p0));
  plans.push_back(std::move(p1));
  auto st = runAll(plans);
  EXPECT_TRUE(st[0].isOk());
  EXPECT_EQ(st[1].code(), ncclInvalidUsage);
  EXPECT_NE(st[1].message().find("different operation"), std::string::npos) << st[1].message();
}

TEST(Executor, MismatchedSizeIsReported) {
  FakeFabric fabric(2, 4, 1024, false);
  std::vector<float> a(256, 1), b(256, 0);
  std::vector<Plan> plans;
  Plan p0 = basePlan(fabric, 0, 1024);
  p0.steps = {step(Op::kSend, -1, 1, a.data(), nullptr, 512)};
  connect(p0);
  Plan p1 = basePlan(fabric, 1, 1024);
  p1.steps = {step(Op::kRecv, 0, -1, nullptr, b.data(), 1024)};
  connect(p1);
  plans.push_back(std::move(p0));
  plans.push_back(std::move(p1));
  ExecOptions opts;
  opts.stallTimeoutMs = 2000;
  auto st = runAll(plans, opts);
  EXPECT_EQ(st[1].code(), ncclInvalidUsage);
  EXPECT_NE(st[1].message().find("different counts"), std::string::npos) << st[1].message();
}

TEST(Executor, StallTimeoutNamesThePeer) {
  FakeFabric fabric(2, 4, 1024, false);
  std::vector<float> b(256, 0);
  Plan p = basePlan(fabric, 1, 1024);
  p.steps = {step(Op::kRecv, 0, -1, nullptr, b.data(), 1024)};
  connect(p);
  std::vector<Lane> lanes(1);
  lanes[0].plans = {&p};
  ExecOptions opts;
  opts.stallTimeoutMs = 300;
  auto t0 = std::chrono::steady_clock::now();
  Status s = execute(lanes, opts);
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(s.code(), ncclTimeout);  // callers with pre-2.30 headers see ncclRemoteError (comm/config.h visibleTo)
  EXPECT_NE(s.message().find("waits for data from rank 0"), std::string::npos) << s.message();
  EXPECT_LT(sec, 5.0);
}

TEST(Executor, AbortFlagStopsAWait) {
  FakeFabric fabric(2, 4, 1024, false);
  std::vector<float> b(256, 0);
  AbortFlag abort;
  Plan p = basePlan(fabric, 1, 1024);
  p.abort = &abort;
  p.steps = {step(Op::kRecv, 0, -1, nullptr, b.data(), 1024)};
  connect(p);
  std::vector<Lane> lanes(1);
  lanes[0].plans = {&p};
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    abort.set();
  });
  Status s = execute(lanes);
  aborter.join();
  EXPECT_EQ(s.code(), ncclRemoteError);
  EXPECT_NE(s.message().find("aborted"), std::string::npos);
}

// Several lanes in one call: one thread drives two ranks (like ncclCommInitAll users).
TEST(Executor, OneThreadDrivesTwoRanks) {
  FakeFabric fabric(2, 2, 1024, false);
  const size_t n = 8192;
  std::vector<std::vector<int32_t>> in(2, std::vector<int32_t>(n)), out(2, std::vector<int32_t>(n, 0));
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < n; ++i) in[r][i] = int32_t(i * 3 + r);
  Plan plans[2];
  std::vector<Lane> lanes(2);
  for (int r = 0; r < 2; ++r) {
    plans[r] = basePlan(fabric, r, 1024);
    plans[r].steps = {step(Op::kSend, -1, 1 - r, in[r].data(), nullptr, n * 4),
                      step(Op::kRecv, 1 - r, -1, nullptr, out[r].data(), n * 4)};
    connect(plans[r]);
    lanes[r].plans = {&plans[r]};
  }
  ASSERT_TRUE(execute(lanes).isOk());
  EXPECT_EQ(out[0], in[1]);
  EXPECT_EQ(out[1], in[0]);
}

}  // namespace
}  // namespace theseus::exec
