// NCCL profiler plugins (NCCL_PROFILER_PLUGIN) with real rank processes. The
// test plugin (test_nccl_profiler.c) writes every call it got; the test reads
// each rank's record and checks counts, nesting and fields for a grouped
// all-to-all (sends and receives to every peer in one group) and for
// allreduces while the epoch protocol swaps their schedule every few calls.
#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mp_test.h"

using theseus::test::runRanks;
using theseus::test::SpawnOptions;

namespace {

constexpr size_t kCount = 1024;      // floats per peer of the all-to-all
constexpr int kAllReduces = 40;
constexpr size_t kAllReduceCount = 16384;

// Profile event type bits (NCCL's values).
enum : uint64_t {
  kGroup = 1 << 0, kColl = 1 << 1, kP2p = 1 << 2, kProxyOp = 1 << 3, kGroupApi = 1 << 8, kCollApi = 1 << 9,
  kP2pApi = 1 << 10, kKernelLaunch = 1 << 11
};

struct Event {
  int id = 0;
  uint64_t type = 0;
  int parent = 0;
  int rank = -1;
  std::vector<std::string> fields;
  std::vector<int> states;
  bool stopped = false;
};

std::map<int, Event> readEvents(const std::string& path) {
  std::map<int, Event> events;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::string what;
    int id;
    ls >> what >> id;
    if (what == "start") {
      Event e;
      e.id = id;
      ls >> e.type >> e.parent >> e.rank;
      for (std::string f; ls >> f;) e.fields.push_back(f);
      events[id] = e;
    } else if (what == "state") {
      int s;
      ls >> s;
      events[id].states.push_back(s);
    } else if (what == "stop") {
      events[id].stopped = true;
    }
  }
  return events;
}

}  // namespace

THESEUS_RANK_FN(profiled_work) {
  const int n = ctx.nranks;
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, n, ctx.id, ctx.rank));
  std::vector<float> send(kCount * n), recv(kCount * n, -1.0f);
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < kCount; ++i) send[p * kCount + i] = float(ctx.rank * 1000 + p);
  RANK_NCCL(ncclGroupStart());
  for (int p = 0; p < n; ++p) {
    RANK_NCCL(ncclSend(send.data() + p * kCount, kCount, ncclFloat32, p, comm, nullptr));
    RANK_NCCL(ncclRecv(recv.data() + p * kCount, kCount, ncclFloat32, p, comm, nullptr));
  }
  RANK_NCCL(ncclGroupEnd());
  for (int p = 0; p < n; ++p) RANK_CHECK(recv[p * kCount + 7] == float(p * 1000 + ctx.rank));
  std::vector<float> buf(kAllReduceCount);
  for (int i = 0; i < kAllReduces; ++i) {
    for (auto& v : buf) v = float(ctx.rank + 1);
    RANK_NCCL(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr));
    RANK_CHECK(buf[kAllReduceCount - 1] == float(n * (n + 1) / 2));
  }
  RANK_NCCL(ncclCommDestroy(comm));  // finalize() writes the record
  return 0;
}

// A communicator whose profiler cannot be used still works (the reason is a WARN).
THESEUS_RANK_FN(unprofiled_allreduce) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  float x = 1;
  RANK_NCCL(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr));
  RANK_CHECK(x == float(ctx.nranks));
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

class ProfilerPlugin : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/theseus-profiler-" + std::to_string(getpid());
    ASSERT_EQ(system(("rm -rf " + dir_ + " && mkdir -p " + dir_).c_str()), 0);
  }
  void TearDown() override { (void)system(("rm -rf " + dir_).c_str()); }
  std::string logs() const {
    std::string all;
    if (DIR* d = opendir(dir_.c_str())) {
      while (dirent* e = readdir(d)) {
        std::string name = e->d_name;
        if (name.rfind("log.", 0) != 0) continue;
        std::ifstream in(dir_ + "/" + name);
        all += std::string(std::istreambuf_iterator<char>(in), {});
      }
      closedir(d);
    }
    return all;
  }
  std::string dir_;
};

void checkRecord(const std::string& path, int rank, int n) {
  SCOPED_TRACE(path);
  auto events = readEvents(path);
  ASSERT_FALSE(events.empty());
  std::map<uint64_t, int> count;
  for (auto& [id, e] : events) {
    ++count[e.type];
    EXPECT_TRUE(e.stopped) << "event " << id << " of type " << e.type << " never stopped";
    EXPECT_EQ(e.rank, rank);
    if (e.parent != 0) {
      ASSERT_TRUE(events.count(e.parent)) << "event " << id << " has an unknown parent";
      EXPECT_LT(e.parent, id) << "a parent starts before its children";
    }
  }
  // One explicit group (the all-to-all); every other launch is an implicit group of one allreduce.
  EXPECT_EQ(count[kGroupApi], 1);
  EXPECT_EQ(count[kP2pApi], 2 * n);
  EXPECT_EQ(count[kP2p], 2 * n);
  EXPECT_EQ(count[kCollApi], kAllReduces);
  EXPECT_EQ(count[kColl], kAllReduces);
  EXPECT_EQ(count[kGroup], 1 + kAllReduces);
  EXPECT_EQ(count[kKernelLaunch], 1 + kAllReduces);
  EXPECT_GT(count[kProxyOp], 0);

  std::set<int> sendPeers, recvPeers;
  std::set<std::string> algos;
  uint64_t lastSeq = 0;
  bool seenColl = false;
  for (auto& [id, e] : events) {
    const Event* parent = e.parent ? &events[e.parent] : nullptr;
    switch (e.type) {
      case kGroupApi:
        ASSERT_EQ(e.fields.size(), 1u);
        EXPECT_EQ(e.fields[0], "1");  // depth
        EXPECT_EQ(e.states, (std::vector<int>{23, 24}));  // GroupStartApiStop, then GroupEndApiStart
        EXPECT_EQ(e.parent, 0);
        break;
      case kP2pApi:
        ASSERT_NE(parent, nullptr);
        EXPECT_EQ(parent->type, kGroupApi);
        EXPECT_EQ(e.fields.at(1), std::to_string(kCount));
        EXPECT_EQ(e.fields.at(2), "ncclFloat32");
        break;
      case kP2p: {
        ASSERT_NE(parent, nullptr);
        EXPECT_EQ(parent->type, kP2pApi);
        EXPECT_EQ(parent->fields.at(0), e.fields.at(0));  // the same call
        const std::string& func = e.fields.at(0);
        EXPECT_EQ(e.fields.at(1), std::to_string(kCount));
        EXPECT_EQ(e.fields.at(2), "ncclFloat32");
        int peer = std::stoi(e.fields.at(3));
        (func == "Send" ? sendPeers : recvPeers).insert(peer);
        EXPECT_TRUE(func == "Send" || func == "Recv") << func;
        EXPECT_EQ(events[std::stoi(e.fields.at(5))].type, kGroup);  // parentGroup
        break;
      }
      case kCollApi:
        EXPECT_EQ(e.fields.at(0), "AllReduce");
        EXPECT_EQ(e.parent, 0);  // not in an explicit group
        break;
      case kColl: {
        ASSERT_NE(parent, nullptr);
        EXPECT_EQ(parent->type, kCollApi);
        EXPECT_EQ(e.fields.at(1), "AllReduce");
        EXPECT_EQ(e.fields.at(2), std::to_string(kAllReduceCount));
        EXPECT_EQ(e.fields.at(4), "ncclFloat32");
        EXPECT_GE(std::stoi(e.fields.at(5)), 1);  // nChannels
        algos.insert(e.fields.at(6));
        EXPECT_EQ(e.fields.at(7), "Simple");
        EXPECT_EQ(events[std::stoi(e.fields.at(8))].type, kGroup);
        uint64_t seq = std::stoull(e.fields.at(0));
        if (seenColl) {
          EXPECT_GT(seq, lastSeq);  // collective numbers grow
        }
        seenColl = true;
        lastSeq = seq;
        break;
      }
      case kProxyOp:
        ASSERT_NE(parent, nullptr);
        EXPECT_TRUE(parent->type == kColl || parent->type == kP2p);
        EXPECT_GT(std::stoi(e.fields.at(2)), 0);  // nSteps
        EXPECT_GT(std::stoi(e.fields.at(3)), 0);  // chunkSize
        if (parent->type == kP2p) {
          EXPECT_EQ(e.fields.at(0), parent->fields.at(3));  // the proxy op talks to the p2p's peer
          EXPECT_EQ(e.fields.at(4), parent->fields.at(0) == "Send" ? "1" : "0");
        }
        break;
      case kKernelLaunch:
        if (parent != nullptr) {
          EXPECT_TRUE(parent->type == kGroupApi || parent->type == kCollApi);
        }
        break;
      default: break;
    }
  }
  std::set<int> everyone;
  for (int p = 0; p < n; ++p) everyone.insert(p);
  EXPECT_EQ(sendPeers, everyone);
  EXPECT_EQ(recvPeers, everyone);
  // The schedule swapped while the allreduces ran, and the events say which one ran.
  EXPECT_GE(algos.size(), 2u) << "algorithms seen: " << testing::PrintToString(algos);
}

TEST_F(ProfilerPlugin, GroupedAllToAllAndSwappingAllReduce) {
  for (const char* plugin : {TEST_PROFILER_GOOD, TEST_PROFILER_V5}) {
    SCOPED_TRACE(plugin);
    const int n = 3;
    SpawnOptions o;
    o.env["NCCL_PROFILER_PLUGIN"] = plugin;
    o.env["TEST_PROFILER_OUT"] = dir_ + "/events";
    o.env["THESEUS_EPOCH_TEST_SWAP_EVERY"] = "4";
    auto r = runRanks("profiled_work", n, o);
    ASSERT_TRUE(r.allOk()) << r.describe();
    for (int rank = 0; rank < n; ++rank) checkRecord(dir_ + "/events." + std::to_string(rank), rank, n);
  }
}

TEST_F(ProfilerPlugin, AMaskOfNothingCostsNothing) {
  SpawnOptions o;
  o.env["NCCL_PROFILER_PLUGIN"] = TEST_PROFILER_GOOD;
  o.env["TEST_PROFILER_OUT"] = dir_ + "/events";
  o.env["TEST_PROFILER_MASK"] = "0";
  auto r = runRanks("unprofiled_allreduce", 2, o);
  ASSERT_TRUE(r.allOk()) << r.describe();
  for (int rank = 0; rank < 2; ++rank) {
    auto events = readEvents(dir_ + "/events." + std::to_string(rank));
    EXPECT_TRUE(events.empty());  // finalized, nothing started
  }
}

TEST_F(ProfilerPlugin, UnusablePluginsAreNamedAndTheJobRuns) {
  struct Case {
    const char* plugin;
    const char* says;
  };
  for (const Case& c : {Case{TEST_PROFILER_V4, "exports ncclProfiler_v4, an older profiler plugin ABI than Theseus "
                                               "reads (ncclProfiler_v6 or ncclProfiler_v5)"},
                        Case{TEST_PROFILER_INIT_FAILS, "init() failed with 2 (ncclSystemError)"},
                        Case{"no-such-profiler", "NCCL_PROFILER_PLUGIN=no-such-profiler: no profiler plugin could be "
                                                 "loaded (tried no-such-profiler, libnccl-profiler-no-such-profiler.so)"}}) {
    SCOPED_TRACE(c.plugin);
    ASSERT_EQ(system(("rm -f " + dir_ + "/log.*").c_str()), 0);
    SpawnOptions o;
    o.env["NCCL_PROFILER_PLUGIN"] = c.plugin;
    o.env["NCCL_DEBUG"] = "WARN";
    o.env["NCCL_DEBUG_FILE"] = dir_ + "/log.%h.%p";
    auto r = runRanks("unprofiled_allreduce", 2, o);
    ASSERT_TRUE(r.allOk()) << r.describe();
    std::string all = logs();
    EXPECT_NE(all.find(c.says), std::string::npos) << all;
    EXPECT_NE(all.find("running without the NCCL profiler plugin"), std::string::npos) << all;
  }
}
