// Schedule plugins: the Bruck example plugin (every rank count, both layouts,
// run on numbers), and rejection of every kind of broken plugin with a clear
// message and without crashing - wrong ABI, missing symbols, NULL functions,
// generator errors, out-of-range indices, wrong results.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "reference_interpreter.h"
#include "schedule/program_cache.h"
#include "schedule/user/plugin_schedule.h"
#include "schedule/verifier.h"

namespace theseus::schedule::user {
namespace {

GenerateRequest request(int n, bool inPlace, int onlyRank = -1) {
  GenerateRequest req;
  req.collective = Collective::kAllGather;
  req.nranks = n;
  req.inPlace = inPlace;
  req.onlyRank = onlyRank;
  return req;
}

std::string loadError(const char* path) {
  Result<ScheduleHandle> r = loadFile(path);
  EXPECT_FALSE(r.isOk()) << path << " loaded";
  return r.isOk() ? std::string() : r.status().message();
}

TEST(BruckPlugin, LoadsThroughTheFileLoader) {
  Result<ScheduleHandle> s = loadFile(THESEUS_BRUCK_PLUGIN);
  ASSERT_TRUE(s.isOk()) << s.status().message();
  const ScheduleInfo& info = s.value()->info();
  EXPECT_EQ(info.name, "bruck_allgather");
  EXPECT_EQ(info.kind, SourceKind::kPlugin);
  EXPECT_EQ(info.collectives, 1u << static_cast<unsigned>(Collective::kAllGather));
  EXPECT_TRUE(info.rankCounts.empty());
  EXPECT_TRUE(s.value()->supports(Collective::kAllGather, 1000));
  EXPECT_FALSE(s.value()->supports(Collective::kAllReduce, 4));
}

TEST(BruckPlugin, EveryRankCountIsCorrect) {
  Result<ScheduleHandle> s = loadFile(THESEUS_BRUCK_PLUGIN);
  ASSERT_TRUE(s.isOk()) << s.status().message();
  for (int n = 1; n <= 17; ++n) {
    for (bool inPlace : {false, true}) {
      SCOPED_TRACE("n=" + std::to_string(n) + (inPlace ? " in-place" : ""));
      Result<Program> p = s.value()->generate(request(n, inPlace));
      ASSERT_TRUE(p.isOk()) << p.status().message();
      Status st = verifyProgram(p.value());
      ASSERT_TRUE(st.isOk()) << st.message();
      EXPECT_EQ(testing::runAndCheck(p.value(), 5, static_cast<unsigned>(n)), "");
      // ceil(log2 n) rounds: at most 4 messages per round and rank.
      int rounds = 0;
      while ((1 << rounds) < n) ++rounds;
      for (const RankProgram& rp : p.value().ranks) EXPECT_LE(rp.steps.size(), 1u + 4u * rounds);
    }
  }
}

TEST(BruckPlugin, OnlyRankAndParameters) {
  Result<ScheduleHandle> s = loadFile(THESEUS_BRUCK_PLUGIN);
  ASSERT_TRUE(s.isOk());
  Result<Program> full = s.value()->generate(request(6, false));
  Result<Program> one = s.value()->generate(request(6, false, 4));
  ASSERT_TRUE(full.isOk() && one.isOk());
  for (int r = 0; r < 6; ++r) EXPECT_EQ(one.value().ranks[r].steps.empty(), r != 4);
  ASSERT_EQ(one.value().ranks[4].steps.size(), full.value().ranks[4].steps.size());
  GenerateRequest req = request(6, false);
  req.params.channels = 2;
  Result<Program> bad = s.value()->generate(req);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("generate() failed (code 1): bruck_allgather takes no parameters "
                                        "(got 'channels=2')"),
            std::string::npos)
      << bad.status().message();
}

GenerateRequest allreduce(int n, bool inPlace, std::vector<int> hostOf = {}) {
  GenerateRequest req;
  req.collective = Collective::kAllReduce;
  req.nranks = n;
  req.inPlace = inPlace;
  req.hostOf = std::move(hostOf);
  return req;
}

// The peers rank r talks to.
std::set<int> peersOf(const Program& p, int r) {
  std::set<int> out;
  for (const Step& s : p.ranks[r].steps) {
    if (s.recvPeer >= 0) out.insert(s.recvPeer);
    if (s.sendPeer >= 0) out.insert(s.sendPeer);
  }
  return out;
}

TEST(Torus2dPlugin, EveryRankCountIsCorrect) {
  Result<ScheduleHandle> s = loadFile(THESEUS_TORUS_PLUGIN);
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_EQ(s.value()->name(), "torus2d_allreduce");
  EXPECT_EQ(s.value()->info().collectives, 1u << static_cast<unsigned>(Collective::kAllReduce));
  for (int n = 1; n <= 20; ++n) {
    for (bool inPlace : {false, true}) {
      SCOPED_TRACE("n=" + std::to_string(n) + (inPlace ? " in-place" : ""));
      Result<Program> p = s.value()->generate(allreduce(n, inPlace));
      ASSERT_TRUE(p.isOk()) << p.status().message();
      Status st = verifyProgram(p.value());
      ASSERT_TRUE(st.isOk()) << st.message();
      for (size_t unit : {1, 7, 100}) EXPECT_EQ(testing::runAndCheck(p.value(), unit, static_cast<unsigned>(n)), "");
    }
  }
  // 12 ranks without hosts: a 3 x 4 grid, so rank 5 = (1, 1) talks to its row (4, 6) and column (1, 9).
  Result<Program> p = s.value()->generate(allreduce(12, false));
  ASSERT_TRUE(p.isOk());
  EXPECT_EQ(peersOf(p.value(), 5), (std::set<int>{1, 4, 6, 9}));
}

TEST(Torus2dPlugin, RowsFollowRegularHosts) {
  Result<ScheduleHandle> s = loadFile(THESEUS_TORUS_PLUGIN);
  ASSERT_TRUE(s.isOk());
  // 2 hosts of 6 ranks: rows are hosts (2 x 6), so rank 7 = (1, 1) has row peers 6, 8 and column peer 1.
  std::vector<int> twoHosts = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
  for (bool inPlace : {false, true}) {
    Result<Program> p = s.value()->generate(allreduce(12, inPlace, twoHosts));
    ASSERT_TRUE(p.isOk()) << p.status().message();
    ASSERT_TRUE(verifyProgram(p.value()).isOk());
    EXPECT_EQ(testing::runAndCheck(p.value(), 13), "");
    EXPECT_EQ(peersOf(p.value(), 7), (std::set<int>{1, 6, 8}));
  }
  // Irregular hosts (5 + 7 ranks) fall back to the square-ish grid.
  std::vector<int> irregular = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1};
  Result<Program> q = s.value()->generate(allreduce(12, false, irregular));
  ASSERT_TRUE(q.isOk());
  EXPECT_TRUE(verifyProgram(q.value()).isOk());
  EXPECT_EQ(peersOf(q.value(), 5), (std::set<int>{1, 4, 6, 9}));
}

TEST(PluginRejections, DescriptorProblems) {
  EXPECT_NE(loadError(TEST_PLUGIN_ABI_VERSION).find("theseusSchedulePlugin_v1 has abi_version 99, expected 1"),
            std::string::npos);
  EXPECT_NE(loadError(TEST_PLUGIN_STRUCT_SIZE).find("has struct_size"), std::string::npos);
  EXPECT_NE(loadError(TEST_PLUGIN_NO_SYMBOL).find("not a schedule plugin: symbol theseusSchedulePlugin_v1 "
                                                  "not found"),
            std::string::npos);
  EXPECT_NE(loadError(TEST_PLUGIN_FUTURE_SYMBOL).find("exports theseusSchedulePlugin_v2, a newer schedule plugin ABI"),
            std::string::npos);
  EXPECT_NE(loadError(TEST_PLUGIN_NULL_GENERATE).find("plugin 'faulty_gen': required function generate() is NULL"),
            std::string::npos);
  EXPECT_NE(loadError(TEST_PLUGIN_BAD_NAME).find("schedule name 'bad name!' contains ' '"), std::string::npos);
  EXPECT_NE(loadError(TEST_PLUGIN_INIT_FAILS).find("plugin 'faulty_gen': init() failed (code 2)"), std::string::npos);
  EXPECT_NE(loadError("/nonexistent/libx.so").find("cannot load schedule plugin"), std::string::npos);
  // A file that is not a shared library at all.
  char path[] = "/tmp/theseus_not_a_plugin_XXXXXX.so";
  int fd = mkstemps(path, 3);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "hello", 5), 5);
  close(fd);
  EXPECT_NE(loadError(path).find("cannot load schedule plugin"), std::string::npos);
  unlink(path);
}

// The generator plugin misbehaves differently per rank count (test_plugin.c).
TEST(PluginRejections, GeneratorProblems) {
  Result<ScheduleHandle> s = loadFile(TEST_PLUGIN_GENERATOR);
  ASSERT_TRUE(s.isOk()) << s.status().message();
  // The library's own counters (the loader keeps it open, so this is the same copy).
  void* lib = dlopen(TEST_PLUGIN_GENERATOR, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto generates = reinterpret_cast<int (*)()>(dlsym(lib, "testPluginGenerates"));
  auto releases = reinterpret_cast<int (*)()>(dlsym(lib, "testPluginReleases"));
  ASSERT_TRUE(generates && releases);
  const int generatesBefore = generates(), releasesBefore = releases();
  struct Expect {
    int nranks;
    const char* text;
  };
  const Expect cases[] = {
      {3, "generate() failed (code 1): no program for 3 ranks (test)"},
      {4, "rank 1 step 2: op 42 is not a valid op (0..7)"},
      {5, "rank 2 step 1: channel 300 is out of range: the program has 1 channel(s)"},
      {6, "rank 3 has 11 steps but its steps array is NULL"},
      {7, "rank 0 step 3: ndeps 5000 exceeds the limit of 1024"},
      {8, "rank 0 step 0: dep 5 is not an earlier step of rank 0"},
      {9, "rank 0 step 1: src buffer 7 is not a buffer (0 input, 1 output, 2 scratch)"},
      {10, "the program's ranks array is NULL"},
      {11, "chunks_per_block 0 is out of range 1..65536"},
      {13, "nchannels 0 is out of range 1..32"},
      {14, "rank 0 step 2: ndeps is 2 but deps is NULL"},
  };
  for (const Expect& e : cases) {
    Result<Program> p = s.value()->generate(request(e.nranks, false));
    ASSERT_FALSE(p.isOk()) << "nranks " << e.nranks << " accepted";
    const std::string& m = p.status().message();
    EXPECT_NE(m.find("schedule plugin 'faulty_gen' (" TEST_PLUGIN_GENERATOR "): allgather nranks=" +
                     std::to_string(e.nranks) + " out-of-place"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find(e.text), std::string::npos) << m << "\nwants: " << e.text;
  }
  // Garbage in unused peer fields is ignored; a correct program loads.
  Result<Program> good = s.value()->generate(request(2, false));
  ASSERT_TRUE(good.isOk()) << good.status().message();
  EXPECT_TRUE(verifyProgram(good.value()).isOk());
  // release() ran after every generate(), the failed ones included.
  EXPECT_EQ(generates() - generatesBefore, 12);
  EXPECT_EQ(releases() - releasesBefore, 12);
  dlclose(lib);
}

// A structurally valid but wrong program gets through the plugin loader and
// is stopped by the ProgramCache's verification of external programs.
TEST(PluginRejections, WrongResultIsCaughtByTheCache) {
  Result<ScheduleHandle> s = loadFile(TEST_PLUGIN_GENERATOR);
  ASSERT_TRUE(s.isOk());
  ScheduleHandle plugin = s.value();
  ProgramCache::Options opts;
  opts.external = [plugin](const std::string&, const GenerateRequest& req) { return plugin->generate(req); };
  ProgramCache cache(opts);
  GenerateRequest req = request(12, false, 3);
  Result<std::shared_ptr<const CachedProgram>> p = cache.get(ProgramKey::make("faulty_gen", req));
  ASSERT_FALSE(p.isOk());
  EXPECT_NE(p.status().message().find("failed verification"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("rank 1 output chunk 1 is never written"), std::string::npos)
      << p.status().message();
  Result<std::shared_ptr<const CachedProgram>> ok = cache.get(ProgramKey::make("faulty_gen", request(2, false, 1)));
  ASSERT_TRUE(ok.isOk()) << ok.status().message();
  EXPECT_TRUE(ok.value()->verified);
}

}  // namespace
}  // namespace theseus::schedule::user
