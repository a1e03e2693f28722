// The doctor over synthetic flight-recorder dumps (doctor/dump_analysis.h): a mismatched
// collective, a wrong count, a rank that never arrived, a missing dump, a dead rank, the end of a
// wait chain, compute stragglers from arrival times (one that recovers too), slow links from the
// dumps' attributes and transport counters, malformed dumps, and a healthy job.
#include <gtest/gtest.h>

#include "doctor/dump.h"
#include "doctor/dump_analysis.h"

namespace theseus::doctor {
namespace {

nlohmann::json entry(uint64_t seq, const char* op, uint64_t count, const char* state, uint64_t startNs = 0,
                     const char* waiting = nullptr, uint64_t durationNs = 10) {
  nlohmann::json e = {{"id", seq + 1},   {"seq", seq},         {"op", op},
                      {"schedule", "ring"}, {"count", count},  {"dtype", "float"},
                      {"bytes", count * 4}, {"peer", -1},      {"state", state},
                      {"queued_ns", startNs}, {"start_ns", startNs}, {"end_ns", startNs + durationNs}};
  if (waiting != nullptr) e["waiting"] = waiting;
  return e;
}

nlohmann::json dump(int rank, int nranks, std::vector<nlohmann::json> entries) {
  return {{"format", 1},         {"rank", rank},    {"nranks", nranks}, {"comm", "abc"}, {"host", "h"},
          {"pid", 100 + rank},   {"reason", "test"}, {"now_ns", 0},     {"entries", entries}};
}

std::vector<Finding> run(const std::vector<nlohmann::json>& jsons) {
  std::vector<RankDump> dumps;
  for (size_t i = 0; i < jsons.size(); ++i) {
    auto d = parseDump(jsons[i], "fr." + std::to_string(i));
    EXPECT_TRUE(d.isOk()) << d.status().message();
    if (d.isOk()) dumps.push_back(d.take());
  }
  return diagnose(dumps).verdict.findings;
}

std::vector<std::string> kinds(const std::vector<Finding>& f) {
  std::vector<std::string> k;
  for (const Finding& x : f) k.push_back(x.kind);
  return k;
}

// Every rank runs `n` allreduces 100 ms apart; rank r arrives late(r, seq) after the others, and
// each collective ends 1 ms after its last rank arrived.
template <typename Late>
std::vector<nlohmann::json> loop(int nranks, uint64_t n, Late late) {
  std::vector<std::vector<nlohmann::json>> entries(nranks);
  for (uint64_t s = 0; s < n; ++s) {
    uint64_t last = 0;
    for (int r = 0; r < nranks; ++r) last = std::max<uint64_t>(last, late(r, s));
    const uint64_t end = s * 100000000 + last + 1000000;
    for (int r = 0; r < nranks; ++r) {
      const uint64_t start = s * 100000000 + late(r, s);
      entries[r].push_back(entry(s, "allreduce", 8, "done", start, nullptr, end - start));
    }
  }
  std::vector<nlohmann::json> dumps;
  for (int r = 0; r < nranks; ++r) dumps.push_back(dump(r, nranks, entries[r]));
  return dumps;
}

}  // namespace

TEST(Doctor, AMismatchedCollectiveNamesTheOddRank) {
  auto f = run({dump(0, 3, {entry(0, "allreduce", 10, "done"), entry(1, "allreduce", 10, "running")}),
                dump(1, 3, {entry(0, "allreduce", 10, "done"), entry(1, "allgather", 10, "running")}),
                dump(2, 3, {entry(0, "allreduce", 10, "done"), entry(1, "allreduce", 10, "running")})});
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].kind, "mismatch");
  EXPECT_EQ(f[0].ranks, std::vector<int>({1}));
  EXPECT_NE(f[0].words.find("collective #1"), std::string::npos) << f[0].words;
}

TEST(Doctor, AWrongCountIsAMismatch) {
  auto f = run({dump(0, 3, {entry(0, "allreduce", 10, "running")}), dump(1, 3, {entry(0, "allreduce", 20, "running")}),
                dump(2, 3, {entry(0, "allreduce", 10, "running")})});
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].kind, "mismatch");
  EXPECT_EQ(f[0].ranks, std::vector<int>({1}));
  EXPECT_NE(f[0].words.find("20 x float"), std::string::npos) << f[0].words;
}

// The same collective over different FIFOs: rank 1 passed pageable host memory where its peers passed device
// memory on a communicator whose ranks use the CUDA executor. Device beside pinned host memory (both the CUDA
// executor's) and host beside staged device memory (both host FIFOs) are no mismatch.
TEST(Doctor, BuffersOfAnotherKindThatTakeOtherFifosAreAMismatch) {
  auto on = [](nlohmann::json e, const char* memory, const char* executor) {
    e["memory"] = memory;
    e["executor"] = executor;
    return e;
  };
  auto waiting = [&](uint64_t seq, const char* memory, const char* executor) {
    return on(entry(seq, "allreduce", 10, "running", 0, "waits for data from rank 0"), memory, executor);
  };
  auto f = run({dump(0, 3, {on(entry(0, "allreduce", 10, "done"), "device", "cuda"), waiting(1, "device", "cuda")}),
                dump(1, 3, {on(entry(0, "allreduce", 10, "done"), "device", "cuda"), waiting(1, "host", "host")}),
                dump(2, 3, {on(entry(0, "allreduce", 10, "done"), "pinned host", "cuda"),
                            waiting(1, "pinned host", "cuda")})});
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].kind, "mismatch");
  EXPECT_EQ(f[0].ranks, std::vector<int>({1}));
  for (const char* says : {"collective #1", "different FIFOs", "rank 1 passed host memory (the host executor's host",
                           "ranks 0 and 2 passed device or pinned host memory (the cuda executor's device FIFOs)",
                           "Pass buffers of the same kind on every rank"})
    EXPECT_NE(f[0].words.find(says), std::string::npos) << says << " in: " << f[0].words;

  auto fine = run({dump(0, 2, {on(entry(0, "allreduce", 10, "done"), "host", "host")}),
                   dump(1, 2, {on(entry(0, "allreduce", 10, "done"), "device", "staging")})});
  for (const Finding& x : fine) EXPECT_NE(x.kind, "mismatch") << x.words;
}

TEST(Doctor, ARankThatNeverArrivedAndAMissingDump) {
  auto f = run({dump(0, 4, {entry(4, "allreduce", 8, "done"), entry(5, "allreduce", 8, "running", 0, "waits for data from rank 2")}),
                dump(1, 4, {entry(4, "allreduce", 8, "done"), entry(5, "allreduce", 8, "running", 0, "waits for data from rank 0")}),
                dump(2, 4, {entry(4, "allreduce", 8, "done")})});
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].kind, "never_arrived");
  EXPECT_EQ(f[0].ranks, std::vector<int>({2}));
  EXPECT_EQ(f[1].kind, "missing_dump");
  EXPECT_EQ(f[1].ranks, std::vector<int>({3}));
}

TEST(Doctor, ADeadRankIsNamedByTheSurvivorsErrorsAndNobodyElseIsBlamed) {
  // Rank 2 died in collective #5; rank 1 was outside the library then (its last collective is #4).
  auto failed = entry(5, "allreduce", 8, "failed", 0, "waits for data from rank 2");
  failed["error"] = "allreduce #5 [ring]: rank 2 (host pid 77) exited or lost its connection";
  auto f = run({dump(0, 3, {entry(4, "allreduce", 8, "done"), failed}), dump(1, 3, {entry(4, "allreduce", 8, "done")})});
  EXPECT_EQ(kinds(f), std::vector<std::string>({"died", "missing_dump"}));
  for (const Finding& x : f) EXPECT_EQ(x.ranks, std::vector<int>({2})) << x.kind;
}

TEST(Doctor, TheEndOfAWaitChainIsNamed) {
  // Every rank is at collective #7; 0 waits for 1, 1 for 2, 2 for nobody (it is not stuck).
  auto f = run({dump(0, 3, {entry(7, "allreduce", 8, "running", 0, "waits for data from rank 1")}),
                dump(1, 3, {entry(7, "allreduce", 8, "running", 0, "waits for data from rank 2")}),
                dump(2, 3, {entry(7, "allreduce", 8, "running")})});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, "waits_for");
  EXPECT_EQ(f[0].ranks, std::vector<int>({2}));
}

TEST(Doctor, AComputeStragglerArrivesLateOnItsOwnClock) {
  // Rank 2 arrives 30 ms late at every collective; its clock is 5 s off the others' (another host).
  auto dumps = loop(3, 20, [](int r, uint64_t) -> uint64_t { return r == 2 ? 30000000 : 0; });
  for (auto& e : dumps[2]["entries"]) {
    e["start_ns"] = e["start_ns"].get<uint64_t>() + 5000000000ull;
    e["end_ns"] = e["end_ns"].get<uint64_t>() + 5000000000ull;
  }
  auto f = run(dumps);
  ASSERT_EQ(f.size(), 1u) << f[0].words;
  EXPECT_EQ(f[0].kind, "compute_straggler");
  EXPECT_EQ(f[0].ranks, std::vector<int>({2}));
  EXPECT_NEAR(f[0].factor, 30000, 100);
  EXPECT_EQ(f[0].words.find("recovered"), std::string::npos) << f[0].words;
}

TEST(Doctor, AStragglerThatRecoveredIsNamedWithWhen) {
  // Rank 1 is 20 ms late in collectives 10..29 of 60, on time before and after.
  auto f = run(loop(4, 60, [](int r, uint64_t s) -> uint64_t { return r == 1 && s >= 10 && s < 30 ? 20000000 : 0; }));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, "compute_straggler");
  EXPECT_EQ(f[0].ranks, std::vector<int>({1}));
  EXPECT_NE(f[0].words.find("#10 and #29"), std::string::npos) << f[0].words;
  EXPECT_NE(f[0].words.find("recovered"), std::string::npos) << f[0].words;
}

TEST(Doctor, ScatteredArrivalsAreNoStraggler) {
  // Every rank is up to 0.9 ms late now and then: below the 1 ms floor.
  auto f = run(loop(4, 40, [](int r, uint64_t s) -> uint64_t { return ((r * 7 + s * 3) % 5) * 220000; }));
  EXPECT_TRUE(f.empty()) << f[0].words;
}

TEST(Doctor, ASlowLinkFromTheDumpsAttributesAndCounters) {
  // 4 ranks on 4 hosts; every link moved 64 MiB; 1 -> 2 at a twentieth of the others' speed and
  // holding back both its ends, now and over the window.
  std::vector<nlohmann::json> dumps;
  for (int r = 0; r < 4; ++r) {
    nlohmann::json d = dump(r, 4, {entry(0, "allreduce", 8, "done", 1000)});
    d["created_ns"] = 0;
    d["now_ns"] = 10000000000ull;
    d["host_of"] = {0, 1, 2, 3};
    nlohmann::json attrs = nlohmann::json::array(), peers = nlohmann::json::array();
    for (int p = 0; p < 4; ++p) {
      if (p == r) continue;
      const bool slow = r == 1 && p == 2, slowIn = r == 2 && p == 1;
      const std::string link = "link." + std::to_string(r) + "." + std::to_string(p);
      attrs.push_back({link + ".bottleneck", slow ? 0.8 : 0.05, 0u, 1000u, 1u});
      attrs.push_back({link + ".gbps", slow ? 0.05 : 1.0 + 0.1 * p, 0u, 1000u, 2u});
      peers.push_back({{"peer", p},
                       {"bytes_sent", 64u << 20},
                       {"send_busy_ns", slow ? 5000000000u : 65000000u},
                       {"bytes_received", 64u << 20},
                       {"recv_wait_ns", slowIn ? 4800000000u : 10000000u}});
    }
    std::sort(attrs.begin(), attrs.end());
    d["attributes"] = {{"format", 1}, {"rank", r}, {"a", attrs}};
    d["peers"] = peers;
    dumps.push_back(d);
  }
  auto f = run(dumps);
  ASSERT_EQ(f.size(), 1u) << f[0].words;
  EXPECT_EQ(f[0].kind, "slow_link");
  ASSERT_EQ(f[0].links.size(), 1u);
  EXPECT_EQ(f[0].links[0], (Link{1, 2}));
  EXPECT_EQ(f[0].ranks, std::vector<int>({1}));
  EXPECT_GT(f[0].factor, 10);
}

TEST(Doctor, AHealthyJobHasNoFinding) {
  auto f = run({dump(0, 2, {entry(0, "allreduce", 8, "done", 1000)}), dump(1, 2, {entry(0, "allreduce", 8, "done", 1000)})});
  EXPECT_TRUE(f.empty());
}

TEST(Doctor, AMalformedDumpGetsAnErrorNamingTheFieldAndWhy) {
  struct Case {
    nlohmann::json dump;
    const char* expect;
  };
  nlohmann::json badSeq = dump(0, 2, {entry(0, "allreduce", 8, "done")});
  badSeq["entries"][0]["seq"] = "x";
  nlohmann::json badState = dump(0, 2, {entry(0, "allreduce", 8, "done")});
  badState["entries"][0]["state"] = "sleeping";
  nlohmann::json badHosts = dump(0, 2, {});
  badHosts["host_of"] = {0};
  nlohmann::json badAttrs = dump(0, 2, {});
  badAttrs["attributes"] = {{"format", 1}, {"rank", 0}, {"a", {{"no such name!", 1, 0u, 0u, 1u}}}};
  nlohmann::json badRank = dump(5, 2, {});
  const Case cases[] = {{nlohmann::json{{"format", 7}}, "fr: format 7 is not 1"},
                        {nlohmann::json{{"hello", 1}}, "fr: format: expected an unsigned integer (missing)"},
                        {nlohmann::json::array(), "fr: (top level): expected a JSON object"},
                        {badSeq, "fr: entries[0].seq: expected an unsigned integer, got \"x\""},
                        {badState, "fr: entries[0].state: expected queued, running, done or failed"},
                        {badHosts, "fr: host_of: expected an array of one host index per rank"},
                        {badAttrs, "fr: attributes: "},
                        {badRank, "fr: rank: expected a rank below nranks, got 5"}};
  for (const Case& c : cases) {
    auto d = parseDump(c.dump, "fr");
    ASSERT_FALSE(d.isOk()) << c.dump.dump();
    EXPECT_NE(d.status().message().find(c.expect), std::string::npos) << d.status().message();
  }
}

}  // namespace theseus::doctor
