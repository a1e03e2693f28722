// Every built-in, for every collective it implements, 1..16 ranks, in place and
// out of place, several roots and parameter sets: the verifier accepts it, the
// reference interpreter computes the right numbers with it, its step counts
// stay small, and generating one rank alone gives that rank's steps.
#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "reference_interpreter.h"
#include "schedule/analysis.h"
#include "schedule/builtins.h"
#include "schedule/verifier.h"

namespace theseus::schedule {
namespace {

const Collective kAll[] = {Collective::kBroadcast,     Collective::kReduce,    Collective::kAllGather,
                           Collective::kReduceScatter, Collective::kAllReduce, Collective::kAlltoAll,
                           Collective::kScatter,       Collective::kGather};

std::vector<int> rootsFor(Collective c, int n) {
  if (!isRooted(c)) return {0};
  std::set<int> roots{0, n - 1, n / 2};
  return {roots.begin(), roots.end()};
}

// Host layouts for the hierarchical schedule: one host, blocks of 2 and 4
// ranks, one rank per host, interleaved, and uneven hosts.
std::vector<std::vector<int>> hostLayouts(int n) {
  std::vector<std::vector<int>> out{{}};
  std::vector<int> pairs(n), quads(n), single(n), mod3(n), uneven(n);
  for (int r = 0; r < n; ++r) {
    pairs[r] = r / 2;
    quads[r] = r / 4;
    single[r] = r;
    mod3[r] = r % 3;
    uneven[r] = r < n / 2 ? 0 : (r < 3 * n / 4 ? 1 : 2);
  }
  for (auto* v : {&pairs, &quads, &single, &mod3, &uneven}) out.push_back(*v);
  return out;
}

std::vector<ScheduleParams> paramSets(const std::string& name, int n) {
  std::vector<ScheduleParams> out(1);
  ScheduleParams two;
  two.channels = 2;
  out.push_back(two);
  if (name == "ring" || name == "tree" || name == "double_binary_tree") {
    ScheduleParams shuffled;
    for (int i = 0; i < n; ++i) shuffled.order.push_back((i * 5 + 3) % n);
    std::set<int> distinct(shuffled.order.begin(), shuffled.order.end());
    if (static_cast<int>(distinct.size()) != n) {  // 5 divides n: use the reversed order
      for (int i = 0; i < n; ++i) shuffled.order[i] = n - 1 - i;
    }
    shuffled.pipelineChunks = 3;
    out.push_back(shuffled);
  }
  if (name == "ring") {
    ScheduleParams bidir;
    bidir.channels = 3;
    bidir.bidirectional = true;
    bidir.pipelineChunks = 1;
    out.push_back(bidir);
  }
  return out;
}

// The executor scales each rank's raw input exactly once when a reduction
// first reads it (PreMulSum, avg), so in a reducing collective no step may
// read a range that is partly raw input and partly partial results.
std::string mixedRawRead(const Program& p) {
  if (!isReducing(p.collective)) return "";
  for (int r = 0; r < p.nranks; ++r) {
    std::set<std::pair<int, uint32_t>> written;
    for (size_t k = 0; k < p.ranks[r].steps.size(); ++k) {
      const Step& s = p.ranks[r].steps[k];
      if (opReadsSrc(s.op)) {
        PhysRange at = physicalRange(p, r, s.src);
        bool inputSpace = p.inPlace ? at.buf != Buf::kScratch : s.src.buf == Buf::kInput;
        uint32_t raw = 0;
        for (uint32_t c = 0; inputSpace && c < at.count; ++c)
          raw += written.count({static_cast<int>(at.buf), at.first + c}) ? 0 : 1;
        if (raw != 0 && raw != at.count) return "rank " + std::to_string(r) + " step " + std::to_string(k);
      }
      if (opWritesDst(s.op)) {
        PhysRange at = physicalRange(p, r, s.dst);
        for (uint32_t c = 0; c < at.count; ++c) written.insert({static_cast<int>(at.buf), at.first + c});
      }
    }
  }
  return "";
}

struct Counts {
  int programs = 0;
  int numeric = 0;
};

void checkOne(const std::string& name, GenerateRequest req, Counts* counts) {
  Result<Program> made = generateBuiltin(name, req);
  ASSERT_TRUE(made.isOk()) << made.status().message();
  const Program& p = made.value();
  std::string what = name + " " + collectiveName(req.collective) + " n=" + std::to_string(req.nranks) +
                     " root=" + std::to_string(req.root) + (req.inPlace ? " in-place" : "") + " params='" +
                     req.params.toString() + "' hosts=" + std::to_string(req.hostOf.size());
  Status st = verifyProgram(p);
  ASSERT_TRUE(st.isOk()) << what << ": " << st.message();
  ASSERT_EQ(mixedRawRead(p), "") << what << ": reads raw input mixed with partial results";
  ++counts->programs;

  // Small step counts: O(n) per channel (plus pipeline chunks for chains/trees).
  const int n = req.nranks;
  const int pieces = req.params.pipelineChunks ? req.params.pipelineChunks : ScheduleParams::kDefaultPipelineChunks;
  const size_t bound = static_cast<size_t>(req.params.channels) * (4 * n + 8 * pieces + 8);
  for (int r = 0; r < n; ++r) ASSERT_LE(p.ranks[r].steps.size(), bound) << what << " rank " << r;

  // Numbers: units that leave chunks empty, uneven and larger.
  if (n <= 9 || n == 16) {
    for (size_t unit : {size_t{1}, size_t{7}}) {
      std::string bad = testing::runAndCheck(p, unit, static_cast<unsigned>(n * 31 + unit));
      ASSERT_EQ(bad, "") << what << " unit=" << unit;
      ++counts->numeric;
    }
  }
  // One rank alone gets exactly its steps of the full program.
  req.onlyRank = n / 2;
  Result<Program> alone = generateBuiltin(name, req);
  ASSERT_TRUE(alone.isOk());
  for (int r = 0; r < n; ++r) {
    const auto& want = r == req.onlyRank ? p.ranks[r].steps : std::vector<Step>{};
    ASSERT_EQ(alone.value().ranks[r].steps.size(), want.size()) << what;
    for (size_t k = 0; k < want.size(); ++k) {
      const Step &a = alone.value().ranks[r].steps[k], &b = want[k];
      ASSERT_TRUE(a.op == b.op && a.src == b.src && a.dst == b.dst && a.recvPeer == b.recvPeer &&
                  a.sendPeer == b.sendPeer && a.channel == b.channel)
          << what << " step " << k;
    }
  }
}

TEST(Builtins, EveryBuiltinVerifiesAndComputesForOneToSixteenRanks) {
  auto t0 = std::chrono::steady_clock::now();
  Counts counts;
  for (const std::string& name : builtinNames()) {
    for (Collective c : kAll) {
      for (int n = 1; n <= 16; ++n) {
        if (!builtinSupports(name, c, n)) continue;
        auto layouts = name == "hierarchical" ? hostLayouts(n) : std::vector<std::vector<int>>{{}};
        for (const ScheduleParams& params : paramSets(name, n))
          for (const std::vector<int>& hosts : layouts)
            for (int root : rootsFor(c, n))
              for (bool inPlace : {false, true}) {
                GenerateRequest req{c, n, root, inPlace, params, hosts};
                checkOne(name, req, &counts);
                if (HasFatalFailure()) return;
              }
      }
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("verified %d built-in programs, %d numeric runs, in %.2f s\n", counts.programs, counts.numeric, secs);
  EXPECT_GT(counts.programs, 3000);
}

TEST(Builtins, EveryCollectiveIsServedForEveryRankCount) {
  for (Collective c : kAll) {
    for (int n = 1; n <= 64; ++n) {
      bool served = false;
      for (const std::string& name : builtinNames()) served |= builtinSupports(name, c, n);
      EXPECT_TRUE(served) << collectiveName(c) << " n=" << n;
    }
  }
  std::vector<std::string> want = {"ring", "tree", "double_binary_tree", "recursive_doubling",
                                   "halving_doubling", "direct", "hierarchical"};
  EXPECT_EQ(builtinNames(), want);
}

TEST(Builtins, LargerCommunicatorsStillVerify) {
  for (int n : {24, 31, 32, 33}) {
    for (const char* name : {"ring", "tree", "double_binary_tree", "recursive_doubling", "halving_doubling"}) {
      GenerateRequest req{Collective::kAllReduce, n, 0, false, {}, {}};
      Result<Program> p = generateBuiltin(name, req);
      ASSERT_TRUE(p.isOk()) << p.status().message();
      Status st = verifyProgram(p.value());
      EXPECT_TRUE(st.isOk()) << name << " n=" << n << ": " << st.message();
    }
    std::vector<int> hosts(n);
    for (int r = 0; r < n; ++r) hosts[r] = r / 8;
    GenerateRequest req{Collective::kAllReduce, n, 0, true, {}, hosts};
    Result<Program> p = generateBuiltin("hierarchical", req);
    ASSERT_TRUE(p.isOk());
    EXPECT_TRUE(verifyProgram(p.value()).isOk());
  }
}

TEST(Builtins, StepCountsAreLinearOrLogarithmic) {
  GenerateRequest req{Collective::kAllReduce, 16, 0, false, {}, {}};
  auto maxSteps = [&](const char* name) {
    Program p = generateBuiltin(name, req).take();
    size_t m = 0;
    for (const RankProgram& rp : p.ranks) m = std::max(m, rp.steps.size());
    return m;
  };
  EXPECT_EQ(maxSteps("ring"), 2u * 16 - 1);         // 2(n-1) transfers + 1 fused
  EXPECT_EQ(maxSteps("recursive_doubling"), 2u * 4);  // log2(16) rounds of send + recv_reduce
  EXPECT_EQ(maxSteps("halving_doubling"), 4u * 4);    // 2 log2(16) rounds of 2 steps
  EXPECT_LE(maxSteps("tree"), 4u * 4);                // <= 2 up + 2 down per pipeline chunk
}

TEST(Builtins, ParamsPrintParseAndHash) {
  ScheduleParams p;
  EXPECT_EQ(p.toString(), "");
  p.order = {0, 2, 1, 3};
  p.channels = 2;
  p.bidirectional = true;
  p.pipelineChunks = 8;
  EXPECT_EQ(p.toString(), "order=0,2,1,3;channels=2;bidirectional=1;pipeline=8");
  Result<ScheduleParams> back = ScheduleParams::parse(p.toString());
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(back.value(), p);
  EXPECT_EQ(back.value().hash(), p.hash());
  ScheduleParams q = p;
  q.order = {0, 1, 2, 3};
  EXPECT_NE(q.hash(), p.hash());
  EXPECT_TRUE(ScheduleParams::parse(" channels = 4 ; ").isOk());
  EXPECT_EQ(ScheduleParams::parse("channels=4").value().channels, 4);
  EXPECT_TRUE(ScheduleParams::parse("").isOk());

  Result<ScheduleParams> bad = ScheduleParams::parse("chanels=2");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("unknown parameter 'chanels'"), std::string::npos) << bad.status().message();
  EXPECT_NE(ScheduleParams::parse("channels=two").status().message().find("not an integer"), std::string::npos);
  EXPECT_NE(ScheduleParams::parse("order=0,x").status().message().find("'x' is not a rank"), std::string::npos);
  EXPECT_NE(ScheduleParams::parse("pipeline").status().message().find("not key=value"), std::string::npos);
  EXPECT_NE(ScheduleParams::parse("bidirectional=maybe").status().message().find("bidirectional"), std::string::npos);
}

std::string generateError(const std::string& name, GenerateRequest req) {
  Result<Program> p = generateBuiltin(name, req);
  return p.isOk() ? "(no error)" : p.status().message();
}

TEST(Builtins, BadRequestsGetClearErrors) {
  GenerateRequest req{Collective::kAllReduce, 4, 0, false, {}, {}};
  EXPECT_NE(generateError("rong", req).find("unknown built-in schedule 'rong'"), std::string::npos);

  GenerateRequest a2a = req;
  a2a.collective = Collective::kAlltoAll;
  std::string e = generateError("tree", a2a);
  EXPECT_NE(e.find("'tree' does not implement alltoall (it implements broadcast, reduce, allreduce)"),
            std::string::npos) << e;

  GenerateRequest r = req;
  r.params.order = {0, 1, 1, 3};
  EXPECT_NE(generateError("ring", r).find("order lists rank 1 twice"), std::string::npos);
  r.params.order = {0, 1, 2};
  EXPECT_NE(generateError("ring", r).find("order has 3 entries for 4 ranks"), std::string::npos);
  r.params.order = {0, 1, 2, 9};
  EXPECT_NE(generateError("ring", r).find("order entry 9 is out of range"), std::string::npos);
  r.params.order = {3, 2, 1, 0};
  EXPECT_NE(generateError("direct", r).find("'direct' takes no 'order' parameter"), std::string::npos);

  r = req;
  r.params.channels = 0;
  EXPECT_NE(generateError("ring", r).find("channels=0 out of range 1..32"), std::string::npos);
  r.params.channels = 1;
  r.params.bidirectional = true;
  EXPECT_NE(generateError("tree", r).find("takes no 'bidirectional'"), std::string::npos);
  r.params.bidirectional = false;
  r.params.pipelineChunks = 4;
  EXPECT_NE(generateError("halving_doubling", r).find("takes no 'pipeline'"), std::string::npos);
  r.params.pipelineChunks = 65;
  EXPECT_NE(generateError("ring", r).find("pipeline=65 out of range"), std::string::npos);

  r = req;
  r.hostOf = {0, 0, 1};
  EXPECT_NE(generateError("hierarchical", r).find("hostOf has 3 entries for 4 ranks"), std::string::npos);
  r.hostOf = {0, -1, 1, 1};
  EXPECT_NE(generateError("hierarchical", r).find("hostOf[1] = -1 is negative"), std::string::npos);

  GenerateRequest b = req;
  b.collective = Collective::kBroadcast;
  b.root = 4;
  EXPECT_NE(generateError("ring", b).find("root 4 out of range for 4 ranks"), std::string::npos);
  b.root = 0;
  b.nranks = 0;
  EXPECT_NE(generateError("ring", b).find("nranks 0 out of range"), std::string::npos);
}

TEST(Builtins, ProgramNamesCarryParameters) {
  GenerateRequest req{Collective::kAllReduce, 4, 0, false, {}, {}};
  req.params.channels = 2;
  EXPECT_EQ(generateBuiltin("ring", req).value().name, "ring(channels=2)");
  req.params.channels = 1;
  EXPECT_EQ(generateBuiltin("direct", req).value().name, "direct");
}

TEST(Builtins, DoubleBinaryTreeInteriorNodesAreLeavesOfTheOtherTree) {
  for (int n = 3; n <= 16; ++n) {
    GenerateRequest req{Collective::kBroadcast, n, 0, false, {}, {}};
    req.params.pipelineChunks = 1;
    Program p = generateBuiltin("double_binary_tree", req).take();
    // A rank forwards (recv_copy_send) in a tree exactly when it is interior there.
    for (int r = 1; r < n; ++r) {
      std::set<int> interiorIn;
      for (const Step& s : p.ranks[r].steps)
        if (s.op == Op::kRecvCopySend) interiorIn.insert(s.channel);
      EXPECT_LE(interiorIn.size(), 1u) << "n=" << n << " rank " << r << " is interior in both trees";
    }
  }
}

}  // namespace
}  // namespace theseus::schedule
