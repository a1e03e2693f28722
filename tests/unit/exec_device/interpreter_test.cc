// The device interpreter on host threads: ranks are groups of threads in
// this process, each group one Team (a thread block: the leader decides, all
// threads move their share of the elements, barriers in between), FIFOs in
// plain memory with the shm layout. Built-in schedules are lowered exactly as
// the executor lowers them (rank templates, exec::Plan, then device plans).
#include <gtest/gtest.h>

#include <barrier>
#include <memory>
#include <thread>
#include <vector>

#include "exec/device/dev_lower.h"
#include "exec/device/interpreter.h"
#include "exec/rank_template.h"
#include "schedule/analysis.h"
#include "schedule/builtins.h"
#include "fifo_world.h"

namespace theseus::exec {
namespace {

using schedule::Collective;

struct RankRun {
  std::unique_ptr<FifoManager> manager;
  std::shared_ptr<const schedule::Program> program;
  std::vector<schedule::RankPlan> analysis;
  std::unique_ptr<RankTemplate> tmpl;
  Plan plan;
  dev::LoweredPlan lowered;
};

// Allreduce of `count` floats over `n` ranks with built-in `name`, each rank a team of `threads`.
// `replays` > 1 runs the same device plans again and again as a CUDA graph replays its launch:
// each replay restarts them from a copy taken before the first (restartPlan), with new inputs and,
// when `deviceScalar` is the reduction's deferred scalar, a new scalar the plans must read afresh.
// Zero-copy (`direct`): every rank registers its buffers and its peers mapped
// them, so messages are read in place; `inPlace` makes input and output one
// buffer, which ranks overwrite while peers may still read it.
struct Variant {
  bool direct = false;
  bool inPlace = false;
};

void runAllreduce(const char* name, int n, size_t count, uint32_t threads, const Reduction& red, size_t slice,
                  int replays = 1, float* deviceScalar = nullptr, Variant variant = {}) {
  FifoWorld world(n, 4, slice);
  schedule::GenerateRequest req;
  req.collective = Collective::kAllReduce;
  req.nranks = n;
  req.inPlace = variant.inPlace;  // the program's hazards must know input and output are one buffer
  auto prog = schedule::generateBuiltin(name, req);
  ASSERT_TRUE(prog.isOk()) << prog.status().message();
  auto program = std::make_shared<const schedule::Program>(prog.take());
  std::vector<std::vector<float>> in(n, std::vector<float>(count)), out(n, std::vector<float>(count, -1.0f));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) in[r][i] = float((i % 17) + r);
  std::vector<RankRun> runs(n);
  std::vector<std::vector<float>> scratch(n, std::vector<float>(program->scratchBlocks * count + 1));
  for (int r = 0; r < n; ++r) {
    RankRun& rr = runs[r];
    rr.manager = std::make_unique<FifoManager>(&world, r);
    auto analysis = schedule::analyzeRank(*program, r);
    ASSERT_TRUE(analysis.isOk());
    auto t = buildRankTemplate(*program, r, analysis.value());
    ASSERT_TRUE(t.isOk()) << t.status().message();
    rr.tmpl = t.take();
    CallBuffers b;
    b.input = reinterpret_cast<const char*>(variant.inPlace ? out[r].data() : in[r].data());
    b.output = reinterpret_cast<char*>(out[r].data());
    if (variant.direct) {  // what the lowering looks exports up by (device buffers of the plan)
      rr.plan.addBuffer(b.input, count * sizeof(float), device::MemoryKind::kDevice, false, nullptr);
      rr.plan.addBuffer(b.output, count * sizeof(float), device::MemoryKind::kDevice, true, nullptr);
      world.exportRange(r, 0, in[r].data(), count * sizeof(float), true);
      world.exportRange(r, 1, out[r].data(), count * sizeof(float), true);
    }
    b.scratch = reinterpret_cast<char*>(scratch[r].data());
    b.unitElems = count;
    b.elemBytes = sizeof(float);
    rr.plan.rank = r;
    rr.plan.transports = rr.manager.get();
    rr.plan.sliceBytes = slice;
    rr.plan.tag = 0x1234;
    lowerTemplate(*rr.tmpl, b, red, rr.plan);
    rr.plan.reduction = red;
    ASSERT_TRUE(dev::lowerForDevice(rr.plan, &rr.lowered).isOk());
  }
  std::vector<dev::Plan> pristine(n);
  for (int r = 0; r < n; ++r) pristine[r] = runs[r].lowered.plan;
  std::vector<std::unique_ptr<std::barrier<>>> barriers;
  std::vector<std::vector<char>> boards(n, std::vector<char>(sizeof(dev::detail::Action) + 64));
  for (int r = 0; r < n; ++r) barriers.push_back(std::make_unique<std::barrier<>>(threads));
  for (int replay = 0; replay < replays; ++replay) {
    const double scalar = deviceScalar != nullptr ? 0.5 * (replay + 1) : red.preMul ? red.scalar : 1.0;
    if (deviceScalar != nullptr) *deviceScalar = float(scalar);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) in[r][i] = float((i % 17) + r + 3 * replay);
    for (int r = 0; r < n && variant.inPlace; ++r) std::copy(in[r].begin(), in[r].end(), out[r].begin());
    std::vector<std::thread> pool;
    std::atomic<int> failures{0};
    for (int r = 0; r < n; ++r) {
      for (uint32_t t = 0; t < threads; ++t) {
        pool.emplace_back([&, r, t] {
          ThreadTeam team{t, threads, barriers[r].get(), &boards[r]};
          if (replay > 0) dev::restartPlan(runs[r].lowered.plan, pristine[r], team);
          for (long spins = 0; spins < 200000000; ++spins) {
            dev::Poll p = dev::pollPlan(runs[r].lowered.plan, team);
            if (p == dev::Poll::kDone) return;
            if (p == dev::Poll::kFailed) {
              failures.fetch_add(1);
              return;
            }
            if (p == dev::Poll::kIdle && t == 0) std::this_thread::yield();
          }
          failures.fetch_add(1);
        });
      }
    }
    for (auto& th : pool) th.join();
    ASSERT_EQ(failures.load(), 0) << name << " replay " << replay;
    uint32_t direct = 0;
    for (int r = 0; r < n; ++r) direct += runs[r].lowered.plan.directSent;
    if (variant.direct) EXPECT_GT(direct, 0u) << name << ": no message was read in place";
    else EXPECT_EQ(direct, 0u) << name;
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) {
        double want = 0;
        for (int q = 0; q < n; ++q) want += scalar * double((i % 17) + q + 3 * replay);
        ASSERT_EQ(out[r][i], float(want)) << name << " rank " << r << " element " << i << " replay " << replay;
      }
  }
}

TEST(DeviceInterpreter, TeamsOfThreadsRunBuiltinAllreduces) {
  Reduction sum;
  for (const char* name : {"ring", "recursive_doubling", "double_binary_tree", "halving_doubling"})
    for (int n : {2, 3, 4}) runAllreduce(name, n, 10007, 4, sum, 4096);
}

TEST(DeviceInterpreter, PreMultipliedSumWithOneAndManyThreads) {
  Reduction r = preMulSumReduction(ncclFloat32, [] {
                  static float s = 0.5f;
                  return &s;
                }()).value();
  for (uint32_t threads : {1u, 3u}) runAllreduce("ring", 3, 5000, threads, r, 1024);
}

// What a CUDA graph does with a captured launch: the same plan images run again and again. Each
// replay restarts them (restartPlan) and gets every result right, a device-resident PreMulSum
// scalar changed between replays included; the FIFO counters carry on across replays.
TEST(DeviceInterpreter, RestartedPlansReplayLikeACapturedGraph) {
  Reduction sum;
  for (const char* name : {"ring", "double_binary_tree"}) runAllreduce(name, 3, 3001, 2, sum, 1024, 4);
  static float scalar = 1.0f;
  Reduction deferred = deferredPreMulSum(ncclFloat32, &scalar, device::MemoryKind::kHost).value();
  runAllreduce("recursive_doubling", 4, 2000, 3, deferred, 512, 3, &scalar);
}

// One rank: the program is one copy from input to output (kept in place, where a scale may need it). The
// lowering drops what changes nothing: an unscaled copy onto itself has no pieces (done in one pass, not one
// visit per slice), and an average over one rank (a PreMulSum by 1) scales nothing; a real scale still runs.
TEST(DeviceLowering, WhatChangesNothingOnOneRankMovesNothing) {
  FifoWorld world(1, 2, 1024);
  FifoManager m(&world, 0);
  const size_t count = 100000;
  static float two = 2.0f;
  struct Case {
    const char* what;
    Reduction red;
    bool inPlace;
    bool moves;   // the copy step keeps its pieces
    bool scales;  // ... and scales
    float factor;
  };
  const Case cases[] = {
      {"sum in place", builtinReduction(ncclSum, ncclFloat32, 1).value(), true, false, false, 1.0f},
      {"avg in place", builtinReduction(ncclAvg, ncclFloat32, 1).value(), true, false, false, 1.0f},
      {"avg out of place", builtinReduction(ncclAvg, ncclFloat32, 1).value(), false, true, false, 1.0f},
      {"premulsum 2 in place", preMulSumReduction(ncclFloat32, &two).value(), true, true, true, 2.0f},
      {"sum out of place", builtinReduction(ncclSum, ncclFloat32, 1).value(), false, true, false, 1.0f},
  };
  for (const Case& c : cases) {
    schedule::GenerateRequest req;
    req.collective = Collective::kAllReduce;
    req.nranks = 1;
    req.inPlace = c.inPlace;
    auto prog = schedule::generateBuiltin("ring", req);
    ASSERT_TRUE(prog.isOk());
    auto analysis = schedule::analyzeRank(prog.value(), 0);
    auto t = buildRankTemplate(prog.value(), 0, analysis.value());
    ASSERT_TRUE(t.isOk());
    std::vector<float> in(count), out(count, -1.0f);
    for (size_t i = 0; i < count; ++i) in[i] = float(i % 101);
    if (c.inPlace) out = in;
    CallBuffers b;
    b.input = reinterpret_cast<const char*>(c.inPlace ? out.data() : in.data());
    b.output = reinterpret_cast<char*>(out.data());
    b.unitElems = count;
    b.elemBytes = sizeof(float);
    Plan plan;
    plan.transports = &m;
    plan.sliceBytes = 1024;
    lowerTemplate(*t.value(), b, c.red, plan);
    plan.reduction = c.red;
    dev::LoweredPlan lp;
    ASSERT_TRUE(dev::lowerForDevice(plan, &lp).isOk());
    ASSERT_EQ(lp.steps.size(), 1u) << c.what;
    EXPECT_EQ(lp.steps[0].nchunks > 0, c.moves) << c.what;
    EXPECT_EQ(lp.steps[0].scaleSrc != 0, c.scales) << c.what;
    dev::SoloTeam team;
    int polls = 1;
    while (dev::pollPlan(lp.plan, team) != dev::Poll::kDone) ASSERT_LT(++polls, 100000) << c.what;
    if (!c.moves) {
      EXPECT_EQ(polls, 1) << c.what;
    }
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], c.factor * float(i % 101)) << c.what << " element " << i;
  }
}

// A send from rank 0 to rank 1 of `bytes` at `src`, and rank 1's receive into `dst`.
PlanStep sendStep(const void* src, size_t bytes) {
  PlanStep st;
  st.op = schedule::Op::kSend;
  st.sendPeer = 1;
  st.hasSrc = true;
  st.src = static_cast<const char*>(src);
  st.bytes = bytes;
  return st;
}
PlanStep recvStep(void* dst, size_t bytes) {
  PlanStep st;
  st.op = schedule::Op::kRecv;
  st.recvPeer = 0;
  st.hasDst = true;
  st.dst = static_cast<char*>(dst);
  st.bytes = bytes;
  return st;
}

// A flat plan of one step between two ranks (a send or a receive on channel 0),
// its buffer recorded as device memory (where the lowering looks exports up).
Plan onePeerPlan(FifoManager* m, int rank, PlanStep st, const void* buf) {
  Plan p;
  p.rank = rank;
  p.transports = m;
  p.sliceBytes = 1024;
  p.elemBytes = 4;
  p.chunked = false;
  p.tag = 9;
  st.index = 0;
  PlanConn c;
  c.peer = 1 - rank;
  c.isSend = st.op == schedule::Op::kSend;
  c.nsteps = 1;
  if (c.isSend) st.outConn = 0;
  else st.inConn = 0;
  p.steps.push_back(st);
  p.conns.push_back(c);
  p.addBuffer(buf, st.bytes, device::MemoryKind::kDevice, !c.isSend, nullptr);
  return p;
}

// Zero-copy: receivers read the senders' registered buffers in place. In
// place, a rank overwrites the very buffer its peers read directly, so a
// round must stay unfinished until the receiver released it, or successors
// would clobber data a peer has yet to read (the results would be wrong).
TEST(DeviceInterpreter, ZeroCopyMessagesAreReadInPlaceAndNeverClobbered) {
  Reduction sum;
  for (bool inPlace : {false, true})
    for (const char* name : {"ring", "recursive_doubling", "double_binary_tree", "halving_doubling"})
      for (int n : {2, 3, 4}) runAllreduce(name, n, 10007, 3, sum, 4096, 1, nullptr, Variant{true, inPlace});
  runAllreduce("ring", 3, 3001, 2, sum, 1024, 3, nullptr, Variant{true, true});  // replayed
}

// A direct message naming memory the receiver has not mapped (a peer that
// lies, or tables out of step) fails the receiving plan before anything is
// read or written, with an error that says so.
TEST(DeviceInterpreter, AZeroCopyMessageTheReceiverCannotReadFailsThePlan) {
  FifoWorld world(2, 2, 1024);
  FifoManager m0(&world, 0), m1(&world, 1);
  std::vector<float> a(100, 1.0f), b(100, 0.0f);
  world.exportRange(0, 5, a.data(), a.size() * sizeof(float), /*mapped=*/false);
  // Rank 1 "acked" entry 5 without mapping it.
  uint64_t* acks = world.fifo(0, 1, 0).directAcks;
  acks[5] = 105;
  Plan p0 = onePeerPlan(&m0, 0, sendStep(a.data(), 400), a.data());
  Plan p1 = onePeerPlan(&m1, 1, recvStep(b.data(), 400), b.data());
  dev::LoweredPlan l0, l1;
  ASSERT_TRUE(dev::lowerForDevice(p0, &l0).isOk());
  ASSERT_TRUE(dev::lowerForDevice(p1, &l1).isOk());
  dev::SoloTeam team;
  EXPECT_EQ(dev::pollPlan(l0.plan, team), dev::Poll::kProgress);  // sent, waits for the release
  EXPECT_EQ(l0.plan.directSent, 1u);
  EXPECT_EQ(dev::pollPlan(l1.plan, team), dev::Poll::kFailed);
  Status st = dev::failureStatus(p1, l1.plan);
  EXPECT_NE(st.message().find("zero-copy message this rank cannot read (export 5, 400 bytes"), std::string::npos)
      << st.message();
  for (float v : b) EXPECT_EQ(v, 0.0f);  // nothing written
  EXPECT_EQ(dev::pollPlan(l0.plan, team), dev::Poll::kIdle);  // never released: the sender does not finish
}

TEST(DeviceInterpreter, AMismatchedMessageFailsThePlan) {
  FifoWorld world(2, 2, 1024);
  FifoManager m0(&world, 0), m1(&world, 1);
  std::vector<float> a(100, 1.0f), b(60, 0.0f);
  Plan p0 = onePeerPlan(&m0, 0, sendStep(a.data(), 400), a.data());
  Plan p1 = onePeerPlan(&m1, 1, recvStep(b.data(), 240), b.data());  // the sender sends 400
  dev::LoweredPlan l0, l1;
  ASSERT_TRUE(dev::lowerForDevice(p0, &l0).isOk());
  ASSERT_TRUE(dev::lowerForDevice(p1, &l1).isOk());
  dev::SoloTeam team;
  EXPECT_EQ(dev::pollPlan(l0.plan, team), dev::Poll::kDone);
  EXPECT_EQ(dev::pollPlan(l1.plan, team), dev::Poll::kFailed);
  Status st = dev::failureStatus(p1, l1.plan);
  EXPECT_NE(st.message().find("expected 240 bytes from rank 0 but received 400"), std::string::npos) << st.message();
  for (float v : b) EXPECT_EQ(v, 0.0f);  // nothing written
}

}  // namespace
}  // namespace theseus::exec
