// JSON schedules: the examples in policies/schedules (verified and run on
// numbers for every program and layout), program selection, root rotation,
// in-place no-op removal, compact vs object ranges, and a round trip of every
// built-in program through the JSON writer and reader.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "reference_interpreter.h"
#include "schedule/builtins.h"
#include "schedule/user/json_schedule.h"
#include "schedule/verifier.h"

namespace theseus::schedule::user {
namespace {

const std::string kExamples = THESEUS_EXAMPLES_DIR;

std::shared_ptr<FixedSchedule> load(const std::string& file) {
  auto r = loadJsonSchedule(kExamples + "/" + file);
  EXPECT_TRUE(r.isOk()) << r.status().message();
  return r.isOk() ? r.value() : nullptr;
}

GenerateRequest request(Collective c, int n, bool inPlace, int root = 0) {
  GenerateRequest req;
  req.collective = c;
  req.nranks = n;
  req.inPlace = inPlace;
  req.root = root;
  return req;
}

// Generates, verifies and runs on numbers (units that do and do not divide
// into the chunks).
void expectRuns(const UserSchedule& s, const GenerateRequest& req) {
  SCOPED_TRACE(s.name() + " " + collectiveName(req.collective) + " n=" + std::to_string(req.nranks) +
               (req.inPlace ? " in-place" : "") + " root=" + std::to_string(req.root));
  Result<Program> p = s.generate(req);
  ASSERT_TRUE(p.isOk()) << p.status().message();
  Status st = verifyProgram(p.value());
  ASSERT_TRUE(st.isOk()) << st.message();
  for (size_t unit : {1, 3, 8, 13, 1000})
    EXPECT_EQ(testing::runAndCheck(p.value(), unit, static_cast<unsigned>(unit)), "") << "unit " << unit;
}

TEST(JsonExamples, RecursiveHalvingDoublingAllreduce) {
  auto s = load("allreduce_rhd_4.json");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->name(), "rhd_allreduce_4");
  EXPECT_EQ(s->info().rankCounts, std::vector<int>{4});
  EXPECT_EQ(s->info().maxBytes, 67108864u);
  EXPECT_TRUE(s->supports(Collective::kAllReduce, 4));
  EXPECT_FALSE(s->supports(Collective::kAllReduce, 8));
  EXPECT_FALSE(s->supports(Collective::kAllGather, 4));
  for (bool inPlace : {false, true}) expectRuns(*s, request(Collective::kAllReduce, 4, inPlace));
  // Not a ring: every rank talks to two partners only, 8 steps each.
  Result<Program> p = s->generate(request(Collective::kAllReduce, 4, false));
  ASSERT_TRUE(p.isOk());
  for (const RankProgram& rp : p.value().ranks) EXPECT_EQ(rp.steps.size(), 8u);
}

TEST(JsonExamples, CustomOrderRing) {
  auto s = load("ring_allreduce_8.json");
  ASSERT_TRUE(s);
  for (bool inPlace : {false, true}) expectRuns(*s, request(Collective::kAllReduce, 8, inPlace));
  // Rank 0 sends to 2 and receives from 1 (order 0 2 4 6 7 5 3 1).
  Result<Program> p = s->generate(request(Collective::kAllReduce, 8, false));
  ASSERT_TRUE(p.isOk());
  for (const Step& st : p.value().ranks[0].steps) {
    if (opSends(st.op)) {
      EXPECT_EQ(st.sendPeer, 2);
    }
    if (opReceives(st.op)) {
      EXPECT_EQ(st.recvPeer, 1);
    }
  }
}

TEST(JsonExamples, RecursiveDoublingAllgatherForSeveralRankCounts) {
  auto s = load("allgather_rd.json");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->info().rankCounts, (std::vector<int>{2, 4, 8}));
  for (int n : {2, 4, 8})
    for (bool inPlace : {false, true}) expectRuns(*s, request(Collective::kAllGather, n, inPlace));
  // In place the copy of step 0 is a copy onto itself and is dropped.
  Result<Program> out = s->generate(request(Collective::kAllGather, 8, false));
  Result<Program> in = s->generate(request(Collective::kAllGather, 8, true));
  ASSERT_TRUE(out.isOk() && in.isOk());
  EXPECT_EQ(out.value().ranks[5].steps.size(), 7u);
  EXPECT_EQ(in.value().ranks[5].steps.size(), 6u);
  EXPECT_EQ(in.value().ranks[5].steps[0].op, Op::kSend);
  // No program for 3 ranks: the error lists what exists.
  Result<Program> none = s->generate(request(Collective::kAllGather, 3, false));
  ASSERT_FALSE(none.isOk());
  EXPECT_NE(none.status().message().find("no program for allgather nranks=3"), std::string::npos)
      << none.status().message();
  EXPECT_NE(none.status().message().find("nranks=2 both, nranks=4 both, nranks=8 both"), std::string::npos)
      << none.status().message();
}

TEST(JsonExamples, BrokenExampleIsRejectedWithItsError) {
  auto r = loadJsonSchedule(kExamples + "/broken_allreduce_4.json");
  ASSERT_FALSE(r.isOk());
  const std::string& m = r.status().message();
  EXPECT_EQ(r.status().code(), ncclInvalidArgument);
  EXPECT_NE(m.find("broken_allreduce_4.json"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 0 output chunk 3 holds {r0:c3, r2:c3} but allreduce needs contributions of all 4 ranks "
                   "(missing r1:c3, r3:c3)"),
            std::string::npos)
      << m;
}

TEST(JsonPrograms, OnlyRankFillsOneRank) {
  auto s = load("ring_allreduce_8.json");
  ASSERT_TRUE(s);
  GenerateRequest req = request(Collective::kAllReduce, 8, false);
  Result<Program> full = s->generate(req);
  req.onlyRank = 5;
  Result<Program> one = s->generate(req);
  ASSERT_TRUE(full.isOk() && one.isOk());
  ASSERT_EQ(one.value().ranks.size(), 8u);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(one.value().ranks[r].steps.empty(), r != 5);
  ASSERT_EQ(one.value().ranks[5].steps.size(), full.value().ranks[5].steps.size());
  for (size_t i = 0; i < full.value().ranks[5].steps.size(); ++i)
    EXPECT_EQ(one.value().ranks[5].steps[i].src, full.value().ranks[5].steps[i].src);
}

TEST(JsonPrograms, ParametersAndWrongCollectiveAreRejected) {
  auto s = load("allreduce_rhd_4.json");
  ASSERT_TRUE(s);
  GenerateRequest req = request(Collective::kAllReduce, 4, false);
  req.params.channels = 2;
  Result<Program> p = s->generate(req);
  ASSERT_FALSE(p.isOk());
  EXPECT_NE(p.status().message().find("takes no parameters (got 'channels=2')"), std::string::npos);
  Result<Program> q = s->generate(request(Collective::kReduceScatter, 4, false));
  ASSERT_FALSE(q.isOk());
  EXPECT_NE(q.status().message().find("implements allreduce, not reducescatter"), std::string::npos);
}

// A binomial broadcast for 4 ranks from root 0, and a gather for root 1.
const char* kBroadcast = R"({
  "version": 1, "name": "bcast4", "collective": "broadcast", "nranks": 4, "root": 0, "in_place": "both",
  "ranks": [
    [{"op": "copy", "src": "input[0]", "dst": "output[0]"},
     {"op": "send", "peer": 2, "src": "output[0]"}, {"op": "send", "peer": 1, "src": "output[0]"}],
    [{"op": "recv", "peer": 0, "dst": "output[0]"}],
    [{"op": "recv_copy_send", "recv_peer": 0, "send_peer": 3, "dst": "output[0]"}],
    [{"op": "recv", "peer": 2, "dst": "output[0]"}]
  ]})";

TEST(JsonPrograms, BroadcastServesEveryRootByRotation) {
  auto s = parseJsonSchedule(kBroadcast, "bcast4.json");
  ASSERT_TRUE(s.isOk()) << s.status().message();
  for (int root = 0; root < 4; ++root)
    for (bool inPlace : {false, true}) expectRuns(*s.value(), request(Collective::kBroadcast, 4, inPlace, root));
  // Root 2: rank 2 plays rank 0, so it sends to rank 0 (2 + 2) and rank 3 (1 + 2).
  Result<Program> p = s.value()->generate(request(Collective::kBroadcast, 4, false, 2));
  ASSERT_TRUE(p.isOk());
  EXPECT_EQ(p.value().root, 2);
  ASSERT_EQ(p.value().ranks[2].steps.size(), 3u);
  EXPECT_EQ(p.value().ranks[2].steps[1].sendPeer, 0);
  EXPECT_EQ(p.value().ranks[2].steps[2].sendPeer, 3);
}

TEST(JsonPrograms, GatherNeedsAProgramPerRoot) {
  const char* gather = R"({
    "version": 1, "name": "gather2", "collective": "gather", "nranks": 2, "root": 1,
    "ranks": [
      [{"op": "send", "peer": 1, "src": "input[0]"}],
      [{"op": "copy", "src": "input[0]", "dst": "output[1]"}, {"op": "recv", "peer": 0, "dst": "output[0]"}]
    ]})";
  auto s = parseJsonSchedule(gather, "gather2.json");
  ASSERT_TRUE(s.isOk()) << s.status().message();
  expectRuns(*s.value(), request(Collective::kGather, 2, false, 1));
  Result<Program> p = s.value()->generate(request(Collective::kGather, 2, false, 0));
  ASSERT_FALSE(p.isOk());
  EXPECT_NE(p.status().message().find("no program for gather nranks=2 root=0"), std::string::npos)
      << p.status().message();
}

TEST(JsonPrograms, CompactAndObjectRangesAreTheSame) {
  const char* compact = R"({"version": 1, "name": "a", "collective": "allgather", "nranks": 2,
    "chunks_per_block": 2, "ranks": [
      [{"op": "copy", "src": "input[0:2]", "dst": "output[0:2]"}, {"op": "send", "peer": 1, "src": "input[0:2]"},
       {"op": "recv", "peer": 1, "dst": "output[2:4]"}],
      [{"op": "copy", "src": "input[0:2]", "dst": "output[2:4]"}, {"op": "send", "peer": 0, "src": "input[0:2]"},
       {"op": "recv", "peer": 0, "dst": "output[0:2]"}]]})";
  const char* object = R"({"version": 1, "name": "a", "collective": "allgather", "nranks": 2,
    "chunks_per_block": 2, "ranks": [
      {"rank": 0, "steps": [
       {"op": "copy", "src": {"buf": "input", "chunk": 0, "count": 2}, "dst": {"buf": "output", "chunk": 0, "count": 2}},
       {"op": "send", "send_peer": 1, "src": {"buf": "input", "chunk": 0, "count": 2}},
       {"op": "recv", "recv_peer": 1, "dst": {"buf": "output", "chunk": 2, "count": 2}}]},
      {"steps": [
       {"op": "copy", "src": {"buf": "input", "chunk": 0, "count": 2}, "dst": {"buf": "output", "chunk": 2, "count": 2}},
       {"op": "send", "peer": 0, "src": {"buf": "input", "chunk": 0, "count": 2}},
       {"op": "recv", "peer": 0, "dst": {"buf": "output", "chunk": 0, "count": 2}}]}]})";
  auto a = parseJsonSchedule(compact, "a.json");
  auto b = parseJsonSchedule(object, "b.json");
  ASSERT_TRUE(a.isOk()) << a.status().message();
  ASSERT_TRUE(b.isOk()) << b.status().message();
  const Program &pa = a.value()->programs()[0].program, &pb = b.value()->programs()[0].program;
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(pa.ranks[r].steps.size(), pb.ranks[r].steps.size());
    for (size_t i = 0; i < pa.ranks[r].steps.size(); ++i) {
      const Step &x = pa.ranks[r].steps[i], &y = pb.ranks[r].steps[i];
      EXPECT_TRUE(x.op == y.op && x.src == y.src && x.dst == y.dst && x.sendPeer == y.sendPeer &&
                  x.recvPeer == y.recvPeer);
    }
  }
}

TEST(JsonPrograms, InPlaceNoopCopiesAreDroppedAndTheirDepsInherited) {
  // Rank 1 copies its input into its output block (a no-op in place) after a
  // receive, then sends with an explicit dep on the copy. In place the copy
  // goes and the send's dep moves to what the copy depended on (step 0).
  const char* doc = R"({"version": 1, "name": "ag", "collective": "allgather", "nranks": 2, "in_place": "both",
    "ranks": [
      [{"op": "copy", "src": "input[0]", "dst": "output[0]"},
       {"op": "send", "peer": 1, "src": "output[0]", "deps": [0]},
       {"op": "recv", "peer": 1, "dst": "output[1]"}],
      [{"op": "recv", "peer": 0, "dst": "output[0]"},
       {"op": "copy", "src": "input[0]", "dst": "output[1]", "deps": [0]},
       {"op": "send", "peer": 0, "src": "output[1]", "deps": [1]}]]})";
  auto s = parseJsonSchedule(doc, "ag.json");
  ASSERT_TRUE(s.isOk()) << s.status().message();
  Result<Program> in = s.value()->generate(request(Collective::kAllGather, 2, true));
  ASSERT_TRUE(in.isOk());
  ASSERT_EQ(in.value().ranks[1].steps.size(), 2u);
  EXPECT_EQ(in.value().ranks[1].steps[1].op, Op::kSend);
  EXPECT_EQ(in.value().ranks[1].steps[1].deps, std::vector<uint32_t>{0});
  ASSERT_EQ(in.value().ranks[0].steps.size(), 2u);
  EXPECT_TRUE(in.value().ranks[0].steps[0].deps.empty());
  for (bool inPlace : {false, true}) expectRuns(*s.value(), request(Collective::kAllGather, 2, inPlace));
}

// Every built-in program, written as JSON and read back, is the same program.
TEST(JsonWriter, RoundTripsEveryBuiltin) {
  const Collective colls[] = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                              Collective::kBroadcast, Collective::kReduce,    Collective::kAlltoAll,
                              Collective::kGather,    Collective::kScatter};
  int checked = 0;
  for (const std::string& name : builtinNames()) {
    for (Collective c : colls) {
      for (int n : {1, 2, 3, 5, 8}) {
        if (!builtinSupports(name, c, n)) continue;
        for (bool inPlace : {false, true}) {
          GenerateRequest req = request(c, n, inPlace, isRooted(c) ? n - 1 : 0);
          if (name == "hierarchical") req.hostOf.assign(n, 0), req.hostOf[n - 1] = n > 1 ? 1 : 0;
          Result<Program> p = generateBuiltin(name, req);
          ASSERT_TRUE(p.isOk()) << name << ": " << p.status().message();
          FixedProgram fp{p.value(), inPlace ? Layout::kInPlace : Layout::kOutOfPlace, "", nullptr};
          std::string text = programsToJson("rt_" + name, c, "round trip", {fp});
          auto back = parseJsonSchedule(text, "rt.json");
          ASSERT_TRUE(back.isOk()) << name << " " << collectiveName(c) << " n=" << n << ": "
                                   << back.status().message();
          const Program& q = back.value()->programs()[0].program;
          EXPECT_EQ(q.chunksPerBlock, p.value().chunksPerBlock);
          EXPECT_EQ(q.scratchBlocks, p.value().scratchBlocks);
          EXPECT_EQ(q.nchannels, p.value().nchannels);
          EXPECT_EQ(q.root, p.value().root);
          for (int r = 0; r < n; ++r) {
            const auto &x = p.value().ranks[r].steps, &y = q.ranks[r].steps;
            ASSERT_EQ(x.size(), y.size());
            for (size_t i = 0; i < x.size(); ++i) {
              EXPECT_EQ(x[i].op, y[i].op);
              EXPECT_EQ(x[i].channel, y[i].channel);
              EXPECT_EQ(x[i].recvPeer, y[i].recvPeer);
              EXPECT_EQ(x[i].sendPeer, y[i].sendPeer);
              if (opReadsSrc(x[i].op)) {
                EXPECT_EQ(x[i].src, y[i].src);
              }
              if (opWritesDst(x[i].op)) {
                EXPECT_EQ(x[i].dst, y[i].dst);
              }
              EXPECT_EQ(x[i].deps, y[i].deps);
            }
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 150);
}

// docs/schemas/schedule.schema.json names the same ops, buffers, collectives
// and reserved names as the loader.
TEST(JsonSchema, MatchesTheLoader) {
  std::ifstream in(std::string(THESEUS_SOURCE_DIR) + "/docs/schemas/schedule.schema.json");
  ASSERT_TRUE(in.good());
  nlohmann::json schema = nlohmann::json::parse(in);
  std::set<std::string> ops, reserved, colls;
  for (const auto& o : schema["$defs"]["step"]["properties"]["op"]["enum"]) ops.insert(o.get<std::string>());
  std::set<std::string> irOps;
  for (int i = 0; i <= static_cast<int>(Op::kRecvReduceCopySend); ++i) irOps.insert(opName(static_cast<Op>(i)));
  EXPECT_EQ(ops, irOps);
  for (const auto& n : schema["properties"]["name"]["not"]["enum"]) reserved.insert(n.get<std::string>());
  EXPECT_EQ(reserved, std::set<std::string>(builtinNames().begin(), builtinNames().end()));
  for (const auto& c : schema["properties"]["collective"]["enum"]) {
    Collective parsed;
    EXPECT_TRUE(parseCollective(c.get<std::string>(), &parsed)) << c;
    colls.insert(c.get<std::string>());
  }
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kBroadcast, Collective::kReduce, Collective::kAlltoAll, Collective::kGather,
                       Collective::kScatter})
    EXPECT_TRUE(colls.count(collectiveName(c))) << collectiveName(c);
  EXPECT_EQ(schema["properties"]["version"]["const"], kJsonFormatVersion);
  EXPECT_EQ(schema["$defs"]["channels"]["maximum"], kMaxUserChannels);
  EXPECT_EQ(schema["$defs"]["chunks_per_block"]["maximum"], kMaxChunksPerBlock);
}

}  // namespace
}  // namespace theseus::schedule::user
