// Plans split into parts (dev_split.h) and lanes of several thread blocks
// (lane_runner.h), on host threads: each rank a lane, each block a team of
// host threads, FIFOs in plain memory. What the CUDA kernel runs when one
// communicator's operation spreads over blocks: the split keeps everything
// that must stay together in one part, the blocks meet between plans, a split
// average is divided once, replays restart every part, and a block that
// fails stops its siblings.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "exec/device/dev_split.h"
#include "exec/device/lane_runner.h"
#include "exec/rank_template.h"
#include "fifo_world.h"
#include "schedule/analysis.h"
#include "schedule/builtins.h"

namespace theseus::exec {
namespace {

using schedule::Collective;

struct HostWait {
  uint64_t now() const {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  }
  void pause() const { std::this_thread::yield(); }
};

// One rank's allreduce of `count` int32 with built-in `name` on `channels` channels, lowered for the device and split.
struct RankOp {
  std::shared_ptr<const schedule::Program> program;
  std::unique_ptr<RankTemplate> tmpl;
  std::vector<int32_t> scratch;
  Plan plan;
  dev::SplitPlan split;
};

void buildAllreduce(FifoManager* m, int rank, int n, const char* name, int channels, const int32_t* in, int32_t* out,
                    size_t count, const Reduction& red, size_t slice, uint32_t tag, uint32_t maxParts, RankOp* op) {
  schedule::GenerateRequest req;
  req.collective = Collective::kAllReduce;
  req.nranks = n;
  req.inPlace = static_cast<const void*>(in) == static_cast<const void*>(out);
  req.params.channels = channels;
  auto prog = schedule::generateBuiltin(name, req);
  ASSERT_TRUE(prog.isOk()) << prog.status().message();
  op->program = std::make_shared<const schedule::Program>(prog.take());
  auto analysis = schedule::analyzeRank(*op->program, rank);
  ASSERT_TRUE(analysis.isOk());
  auto t = buildRankTemplate(*op->program, rank, analysis.value());
  ASSERT_TRUE(t.isOk()) << t.status().message();
  op->tmpl = t.take();
  op->scratch.assign(op->program->scratchBlocks * count + 1, 0);
  CallBuffers b;
  b.input = reinterpret_cast<const char*>(in);
  b.output = reinterpret_cast<char*>(out);
  b.scratch = reinterpret_cast<char*>(op->scratch.data());
  b.unitElems = count;
  b.elemBytes = sizeof(int32_t);
  op->plan.rank = rank;
  op->plan.transports = m;
  op->plan.sliceBytes = slice;
  op->plan.tag = tag;
  lowerTemplate(*op->tmpl, b, red, op->plan);
  op->plan.reduction = red;
  if (red.divideAtEnd) {
    op->plan.divideDst = reinterpret_cast<char*>(out);
    op->plan.divideElems = count;
  }
  ASSERT_TRUE(dev::lowerForDevice(op->plan, &op->split.whole).isOk());
  dev::splitPlan(op->split, maxParts);
}

// A lane's launch image in ordinary memory, as the CUDA executor lays it out.
struct LaneImage {
  std::vector<dev::Plan> plans, pristine;
  std::vector<dev::LaneResult> results;
  std::vector<dev::Arrival> arrivals;
  std::vector<dev::LaneDivide> divides;
  dev::LaneLaunch launch;
};

void assemble(const std::vector<RankOp*>& ops, bool replayable, LaneImage* img) {
  uint32_t B = 1;
  for (RankOp* op : ops) B = std::max(B, op->split.count);
  const size_t nplans = ops.size();
  img->plans.resize(nplans * B);
  img->divides.assign(nplans, dev::LaneDivide{});
  for (size_t i = 0; i < nplans; ++i) {
    const dev::SplitPlan& sp = ops[i]->split;
    for (uint32_t b = 0; b < B; ++b) img->plans[i * B + b] = b < sp.count ? sp.part(b).plan : dev::emptyPart(sp.whole.plan);
    const dev::Plan& w = sp.whole.plan;
    if (sp.count > 1 && w.divideDst != nullptr) img->divides[i] = dev::LaneDivide{w.divideDst, w.divideElems, w.red};
  }
  img->pristine = img->plans;
  img->results.assign(B, dev::LaneResult{});
  img->arrivals.assign(B, dev::Arrival{});
  img->launch = dev::LaneLaunch{};
  img->launch.plans = img->plans.data();
  img->launch.pristine = replayable ? img->pristine.data() : nullptr;
  img->launch.nplans = static_cast<uint32_t>(nplans);
  img->launch.blocks = B;
  img->launch.results = img->results.data();
  img->launch.arrivals = B > 1 ? img->arrivals.data() : nullptr;
  img->launch.divides = B > 1 ? img->divides.data() : nullptr;
  img->launch.stallNs = 60ull * 1000000000;  // a bug fails the test rather than hang it
}

// Runs every rank's lane, each block a team of `threads` host threads with `localBytes` of block-local memory
// (the kernel's shared memory); true when every block finished.
bool runLanes(std::vector<LaneImage>& lanes, uint32_t threads, size_t localBytes = dev::kLocalPlanBytes) {
  struct Block {
    std::unique_ptr<std::barrier<>> bar;
    std::vector<char> board;
    std::vector<dev::Word16> local;
  };
  std::vector<std::unique_ptr<Block>> blocks;
  std::vector<std::thread> pool;
  for (LaneImage& lane : lanes)
    for (uint32_t b = 0; b < lane.launch.blocks; ++b) {
      blocks.push_back(std::make_unique<Block>());
      Block& blk = *blocks.back();
      blk.bar = std::make_unique<std::barrier<>>(threads);
      blk.board.resize(512);
      blk.local.resize(localBytes / sizeof(dev::Word16));
      for (uint32_t t = 0; t < threads; ++t)
        pool.emplace_back([&lane, &blk, b, t, threads, localBytes] {
          ThreadTeam team{t, threads, blk.bar.get(), &blk.board};
          HostWait wait;
          dev::runLane(lane.launch, b, team, wait, dev::LocalMemory{blk.local.data(), localBytes});
        });
    }
  for (auto& th : pool) th.join();
  bool ok = true;
  for (LaneImage& lane : lanes) ok = ok && dev::laneOutcome(lane.results.data(), lane.launch.blocks).state == 1;
  return ok;
}

// Checks the invariants of a split: every step in exactly one part (a local step cut into copies: each copy,
// 0 to parts - 1, in exactly one), predecessors and connections inside their part, no connection (FIFO) in
// two parts.
void expectSoundSplit(const dev::SplitPlan& sp, const std::string& what) {
  std::multiset<uint32_t> indices;
  std::set<std::pair<uint32_t, uint32_t>> copies;
  std::set<const void*> fifos;
  size_t conns = 0;
  for (uint32_t b = 0; b < sp.count; ++b) {
    const dev::Plan& p = sp.part(b).plan;
    EXPECT_GT(p.nsteps, 0u) << what;
    EXPECT_EQ(p.remaining, p.nsteps) << what;
    for (uint32_t s = 0; s < p.nsteps; ++s) {
      const dev::Step& st = p.steps[s];
      indices.insert(st.index);
      EXPECT_TRUE(copies.emplace(st.index, st.part).second) << what << ": step " << st.index << " copy " << int(st.part);
      EXPECT_LT(st.part, st.parts) << what;
      if (st.parts > 1) {
        EXPECT_EQ(st.predBegin, st.predEnd) << what << ": a split step waits on nothing";
      }
      for (uint32_t i = st.predBegin; i < st.predEnd; ++i) EXPECT_LT(p.preds[i], p.nsteps) << what;
      EXPECT_LT(st.inConn, static_cast<int32_t>(p.nconns)) << what;
      EXPECT_LT(st.outConn, static_cast<int32_t>(p.nconns)) << what;
    }
    for (uint32_t c = 0; c < p.nconns; ++c) fifos.insert(p.conns[c].fifo.ctl);
    conns += p.nconns;
  }
  EXPECT_EQ(fifos.size(), conns) << what << ": a connection in two parts";
  for (uint32_t s = 0; s < sp.whole.plan.nsteps; ++s) {
    const size_t n = indices.count(sp.whole.steps[s].index);
    EXPECT_GE(n, 1u) << what << ": step " << s;
    for (uint32_t b = 0; b < sp.count && n > 1; ++b)
      for (uint32_t t = 0; t < sp.part(b).plan.nsteps; ++t)
        if (sp.part(b).plan.steps[t].index == sp.whole.steps[s].index) {
          EXPECT_EQ(sp.part(b).plan.steps[t].parts, n) << what << ": step " << s;
        }
  }
}

TEST(DeviceSplit, IndependentChannelsBecomePartsAndNothingElseIsSplit) {
  Reduction sum = builtinReduction(ncclSum, ncclInt32, 2).value();
  for (const char* name : {"ring", "tree", "double_binary_tree", "recursive_doubling", "halving_doubling", "direct"})
    for (int n : {2, 3, 4})
      for (int channels : {1, 4}) {
        FifoWorld world(n, 2, 4096);
        std::vector<int32_t> in(1000), out(1000);
        for (int r = 0; r < n; ++r) {
          FifoManager m(&world, r);
          RankOp op;
          buildAllreduce(&m, r, n, name, channels, in.data(), out.data(), in.size(), sum, 4096, 7, 16, &op);
          const std::string what = std::string(name) + " n=" + std::to_string(n) + " channels=" +
                                   std::to_string(channels) + " rank " + std::to_string(r);
          expectSoundSplit(op.split, what);
          if (channels == 4) {
            EXPECT_GE(op.split.count, 4u) << what;
          }
          if (std::string(name) == "ring") {
            EXPECT_EQ(op.split.count, static_cast<uint32_t>(channels)) << what;
          }
        }
      }
}

// The next plan of one shape (rank template), size and block count reuses the analysis: its parts
// are those a fresh split of it makes, step for step, with its own addresses; a new size analyses anew.
TEST(DeviceSplit, APlanOfTheSameShapeReusesTheAnalysis) {
  Reduction sum = builtinReduction(ncclSum, ncclInt32, 3).value();
  FifoWorld world(3, 2, 4096);
  FifoManager m(&world, 1);
  std::vector<int32_t> in(3000), out(3000), in2(3000), out2(3000);
  RankOp op;
  buildAllreduce(&m, 1, 3, "ring", 4, in.data(), out.data(), in.size(), sum, 4096, 7, 16, &op);
  const uint64_t shape = op.plan.shapeId;
  ASSERT_NE(shape, 0u);
  dev::splitPlan(op.split, 16, shape, 12000);  // analysed, remembered
  ASSERT_EQ(op.split.count, 4u);
  // The same template on other buffers.
  CallBuffers b;
  b.input = reinterpret_cast<const char*>(in2.data());
  b.output = reinterpret_cast<char*>(out2.data());
  b.scratch = reinterpret_cast<char*>(op.scratch.data());
  b.unitElems = in2.size();
  b.elemBytes = sizeof(int32_t);
  lowerTemplate(*op.tmpl, b, sum, op.plan);
  EXPECT_EQ(op.plan.shapeId, shape);
  ASSERT_TRUE(dev::lowerForDevice(op.plan, &op.split.whole).isOk());
  dev::splitPlan(op.split, 16, shape, 12000);  // reused
  dev::SplitPlan fresh;
  ASSERT_TRUE(dev::lowerForDevice(op.plan, &fresh.whole).isOk());
  dev::splitPlan(fresh, 16);
  ASSERT_EQ(op.split.count, fresh.count);
  expectSoundSplit(op.split, "reused");
  for (uint32_t p = 0; p < fresh.count; ++p) {
    const dev::LoweredPlan& a = op.split.part(p);
    const dev::LoweredPlan& f = fresh.part(p);
    ASSERT_EQ(a.steps.size(), f.steps.size()) << "part " << p;
    EXPECT_EQ(a.preds, f.preds) << "part " << p;
    ASSERT_EQ(a.conns.size(), f.conns.size());
    for (size_t c = 0; c < a.conns.size(); ++c) EXPECT_EQ(a.conns[c].fifo.ctl, f.conns[c].fifo.ctl);
    for (size_t s = 0; s < a.steps.size(); ++s) {
      EXPECT_EQ(a.steps[s].index, f.steps[s].index);
      EXPECT_EQ(a.steps[s].src, f.steps[s].src) << "part " << p << " step " << s;
      EXPECT_EQ(a.steps[s].dst, f.steps[s].dst) << "part " << p << " step " << s;
      EXPECT_EQ(a.steps[s].inConn, f.steps[s].inConn);
      EXPECT_EQ(a.steps[s].outConn, f.steps[s].outConn);
    }
    EXPECT_EQ(a.plan.nsteps, f.plan.nsteps);
    EXPECT_EQ(a.plan.remaining, a.plan.nsteps) << "fresh run state";
  }
  bool readsNewInput = false;
  for (uint32_t p = 0; p < op.split.count; ++p)
    for (const dev::Step& st : op.split.part(p).steps)
      readsNewInput |= st.src == reinterpret_cast<const char*>(in2.data());
  EXPECT_TRUE(readsNewInput) << "the parts address the new buffers";
  // One block now: a different key, analysed anew (not split).
  dev::splitPlan(op.split, 1, shape, 12000);
  EXPECT_EQ(op.split.count, 1u);
}

TEST(DeviceSplit, MoreComponentsThanBlocksAreBalanced) {
  Reduction sum = builtinReduction(ncclSum, ncclInt32, 3).value();
  FifoWorld world(3, 2, 4096);
  FifoManager m(&world, 1);
  std::vector<int32_t> in(3000), out(3000);
  RankOp op;
  buildAllreduce(&m, 1, 3, "ring", 8, in.data(), out.data(), in.size(), sum, 4096, 7, 3, &op);
  ASSERT_EQ(op.split.count, 3u);
  expectSoundSplit(op.split, "ring with 8 channels on 3 blocks");
  uint32_t most = 0, least = ~0u;
  for (uint32_t b = 0; b < 3; ++b) {
    most = std::max(most, op.split.part(b).plan.nsteps);
    least = std::min(least, op.split.part(b).plan.nsteps);
  }
  EXPECT_LE(most, 2 * least);  // 8 equal channels on 3 blocks: 3, 3, 2
  RankOp one;
  buildAllreduce(&m, 1, 3, "ring", 8, in.data(), out.data(), in.size(), sum, 4096, 7, 1, &one);
  EXPECT_EQ(one.split.count, 1u);  // one block: not split
}

// Two operations per lane, as a group: an average (integer, so divided at the end by the blocks
// together) from `in` into `mid`, then a sum of `mid` into `out` on a different channel count, so a
// block's part of the second reads what other blocks wrote in the first. Every result exact, on
// every replay.
struct LaneCase {
  const char* name;
  int n;
  int channels;
  uint32_t maxBlocks;
  uint32_t threads;
  int replays = 1;
  bool direct = false;  // buffers registered and mapped: messages read in place
  size_t localBytes = dev::kLocalPlanBytes;  // 0 or too small for a plan: plans run in place (their images)
  size_t count = 20011;                      // int32 elements per rank
};

void runLaneCase(const LaneCase& c) {
  const size_t count = c.count;
  FifoWorld world(c.n, 4, 2048);
  std::vector<std::unique_ptr<FifoManager>> managers;
  std::vector<std::vector<int32_t>> in(c.n, std::vector<int32_t>(count)), mid(c.n, std::vector<int32_t>(count)),
      out(c.n, std::vector<int32_t>(count));
  std::vector<RankOp> avg(c.n), sum(c.n);
  std::vector<LaneImage> lanes(c.n);
  const Reduction avgRed = builtinReduction(ncclAvg, ncclInt32, c.n).value();
  const Reduction sumRed = builtinReduction(ncclSum, ncclInt32, c.n).value();
  for (int r = 0; r < c.n; ++r) {
    managers.push_back(std::make_unique<FifoManager>(&world, r));
    if (c.direct) {
      world.exportRange(r, 0, in[r].data(), count * 4, true);
      world.exportRange(r, 1, mid[r].data(), count * 4, true);
      world.exportRange(r, 2, out[r].data(), count * 4, true);
    }
  }
  for (int r = 0; r < c.n; ++r) {
    for (auto [op, from, to, red, channels, tag] :
         {std::tuple{&avg[r], in[r].data(), mid[r].data(), avgRed, c.channels, 0x51u},
          std::tuple{&sum[r], mid[r].data(), out[r].data(), sumRed, std::max(1, c.channels - 1), 0x52u}}) {
      if (c.direct) {
        op->plan.addBuffer(from, count * 4, device::MemoryKind::kDevice, false, nullptr);
        op->plan.addBuffer(to, count * 4, device::MemoryKind::kDevice, true, nullptr);
      }
      buildAllreduce(managers[r].get(), r, c.n, c.name, channels, from, to, count, red, 2048, tag, c.maxBlocks, op);
    }
    assemble({&avg[r], &sum[r]}, c.replays > 1, &lanes[r]);
    if (c.maxBlocks > 1 && (c.channels > 1 || count * sizeof(int32_t) >= (2u << 20))) {
      EXPECT_GT(lanes[r].launch.blocks, 1u) << c.name;  // channels, or one rank's copy shared by blocks
    }
  }
  for (int replay = 0; replay < c.replays; ++replay) {
    for (int r = 0; r < c.n; ++r)
      for (size_t i = 0; i < count; ++i) {
        in[r][i] = static_cast<int32_t>((i * 7 + r * 13 + replay * 5) % 1001);
        mid[r][i] = out[r][i] = -1;
      }
    ASSERT_TRUE(runLanes(lanes, c.threads, c.localBytes)) << c.name << " replay " << replay;
    for (int r = 0; r < c.n && c.localBytes >= dev::kLocalPlanBytes; ++r)
      for (const dev::Plan& p : lanes[r].plans)
        for (uint32_t s = 0; s < p.nsteps; ++s)  // run from local copies: the images are never written
          ASSERT_EQ(p.state[s].finishedRounds, 0u) << c.name;
    uint32_t direct = 0;
    for (int r = 0; r < c.n; ++r) direct += dev::laneOutcome(lanes[r].results.data(), lanes[r].launch.blocks).directMessages;
    if (c.direct) {
      EXPECT_GT(direct, 0u) << c.name;
    }
    for (size_t i = 0; i < count; ++i) {
      int64_t total = 0;
      for (int q = 0; q < c.n; ++q) total += in[q][i];
      const int32_t want = static_cast<int32_t>(total / c.n);
      for (int r = 0; r < c.n; ++r) {
        ASSERT_EQ(mid[r][i], want) << c.name << " rank " << r << " element " << i << " replay " << replay;
        ASSERT_EQ(out[r][i], want * c.n) << c.name << " rank " << r << " element " << i << " replay " << replay;
      }
    }
  }
}

TEST(DeviceLanes, BlocksRunTheChannelsOfAPlanSideBySide) {
  runLaneCase({"ring", 3, 4, 16, 2});
  runLaneCase({"ring", 2, 8, 3, 1});  // more channels than blocks
  runLaneCase({"halving_doubling", 4, 2, 16, 2});
  runLaneCase({"double_binary_tree", 3, 2, 16, 1});
  runLaneCase({"ring", 2, 1, 16, 2});  // one channel: one block, as before
  // One rank: each operation is one copy, cut into copies of at least 1 MiB that blocks move side by side.
  LaneCase one{"ring", 1, 1, 16, 1};
  one.count = 800003;  // 3.2 MB: three copies
  runLaneCase(one);
}

TEST(DeviceSplit, OneLargeLocalStepIsSharedByTheBlocksLeftOver) {
  Reduction sum = builtinReduction(ncclSum, ncclInt32, 1).value();
  FifoWorld world(1, 2, 4096);
  FifoManager m(&world, 0);
  std::vector<int32_t> in(3 << 20), out(3 << 20);  // 12 MiB: at most 12 copies of 1 MiB
  for (uint32_t blocks : {1u, 4u, 16u}) {
    RankOp op;
    buildAllreduce(&m, 0, 1, "ring", 1, in.data(), out.data(), in.size(), sum, 4096, 7, blocks, &op);
    EXPECT_EQ(op.split.count, std::min(blocks, 12u)) << blocks << " blocks";
    expectSoundSplit(op.split, "one rank on " + std::to_string(blocks) + " blocks");
    // The copies' shares of every piece tile it: together they move each byte once.
    const dev::Plan& w = op.split.whole.plan;
    for (uint32_t round = 0; round < w.rounds; round += std::max(1u, w.rounds / 7)) {
      const dev::Piece whole = dev::pieceOf(w, w.steps[0], round, 0);
      std::vector<std::pair<const char*, size_t>> shares;
      for (uint32_t b = 0; b < op.split.count; ++b) {
        const dev::Plan& p = op.split.part(b).plan;
        for (uint32_t t = 0; t < p.nsteps; ++t) {
          const dev::Piece share = dev::pieceOf(p, p.steps[t], round, 0);
          EXPECT_EQ(share.src - whole.src, share.dst - whole.dst);
          shares.emplace_back(share.dst, share.bytes);
        }
      }
      std::sort(shares.begin(), shares.end());
      const char* at = whole.dst;
      for (auto [dst, bytes] : shares) {
        EXPECT_EQ(dst, at) << "round " << round;
        at = dst + bytes;
      }
      EXPECT_EQ(at, whole.dst + whole.bytes) << "round " << round;
    }
  }
  RankOp small;  // 256 KiB: not worth a second block
  buildAllreduce(&m, 0, 1, "ring", 1, in.data(), out.data(), 65536, sum, 4096, 7, 16, &small);
  EXPECT_EQ(small.split.count, 1u);
}

TEST(DeviceLanes, ReplaysRestartEveryBlockAndZeroCopyWorksPerPart) {
  runLaneCase({"ring", 3, 4, 16, 2, /*replays=*/3});
  runLaneCase({"ring", 3, 4, 16, 2, /*replays=*/3, false, /*localBytes=*/0});     // in place: restarted images
  runLaneCase({"direct", 4, 2, 16, 1, /*replays=*/2, false, /*localBytes=*/1024});  // some plans fit, some not
  runLaneCase({"recursive_doubling", 4, 3, 16, 1, /*replays=*/2, /*direct=*/true});
  runLaneCase({"ring", 2, 4, 16, 2, /*replays=*/1, /*direct=*/true});
}

// A block that fails (here: a garbage message on its channel's FIFO) stops the lane's other blocks,
// which would otherwise wait for ever on a peer that never runs (no stall timeout is set): they end
// with kSiblingStopped, and the lane's outcome is the failing block's.
TEST(DeviceLanes, ABlockThatFailsStopsItsSiblings) {
  FifoWorld world(2, 4, 2048);
  FifoManager m(&world, 0);
  std::vector<int32_t> in(8000, 1), out(8000, 0);
  RankOp op;
  buildAllreduce(&m, 0, 2, "ring", 4, in.data(), out.data(), in.size(),
                 builtinReduction(ncclSum, ncclInt32, 2).value(), 2048, 0x77, 16, &op);
  ASSERT_EQ(op.split.count, 4u);
  // Rank 1 never runs; a message with the wrong tag waits on its channel-2 FIFO to rank 0.
  transport::DeviceFifo f = world.fifo(1, 0, 2);
  static_cast<transport::shm::SlotHeader*>(f.headers)[0].tag = 0x99;
  static_cast<transport::shm::SlotHeader*>(f.headers)[0].bytes = 1;
  static_cast<transport::shm::FifoControl*>(f.control)->head.store(1);
  std::vector<LaneImage> lanes(1);
  assemble({&op}, false, &lanes[0]);
  lanes[0].launch.stallNs = 0;  // only the failed sibling can stop the others
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(runLanes(lanes, 2));
  uint32_t reported = 0;  // the failing block's plan ran from a local copy: its failure reaches the image
  for (const dev::Plan& p : lanes[0].plans) reported += p.failure.code == dev::kWrongTag;
  EXPECT_EQ(reported, 1u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  const dev::LaneOutcome o = dev::laneOutcome(lanes[0].results.data(), 4);
  EXPECT_EQ(o.state, 2u);
  uint32_t failed = 0, stopped = 0;
  for (const dev::LaneResult& r : lanes[0].results) {
    failed += r.state == 2;
    stopped += r.state == dev::kSiblingStopped;
  }
  EXPECT_EQ(failed, 1u);
  EXPECT_EQ(stopped, 3u);
}

}  // namespace
}  // namespace theseus::exec
