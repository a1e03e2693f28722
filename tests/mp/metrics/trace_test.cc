// Traces with real ranks: THESEUS_TRACE writes one Chrome/Perfetto file per rank (operations,
// schedule swaps, the per-peer steps of sampled operations, attribute changes), theseus-trace
// merge joins them onto rank 0's clock, and the merged file validates against
// docs/schemas/trace.schema.json (python3-jsonschema) and holds every rank's operations with the
// same swaps, the steps of one operation in THESEUS_TRACE_STEPS, and its attributes as counters.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mp_test.h"
#include "test_files.h"

using theseus::test::readFile;
using theseus::test::runRanks;
using theseus::test::SpawnOptions;

THESEUS_RANK_FN(trace_run) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::vector<float> a(1 << 14, 1.0f);
  for (int i = 0; i < 40; ++i) RANK_NCCL(ncclAllReduce(a.data(), a.data(), a.size(), ncclFloat, ncclSum, comm, nullptr));
  usleep(400000);  // the epoch thread publishes the probes (every 100 ms): attribute changes in the trace
  std::vector<float> b(a.size());
  RANK_NCCL(ncclAllGather(a.data(), b.data(), a.size() / ctx.nranks, ncclFloat, comm, nullptr));
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Trace, RanksTracesMergeOntoOneClockAndValidate) {
  const std::string dir = theseus::test::makeTempDir("theseus-trace");
  ASSERT_FALSE(dir.empty());
  SpawnOptions o;
  o.env["THESEUS_TRACE"] = dir;
  o.env["THESEUS_EPOCH_TEST_SWAP_EVERY"] = "8";  // the leader swaps tables: swap events on every rank
  o.env["THESEUS_EPOCH_TEST_SEED"] = "3";
  o.env["THESEUS_TRACE_STEPS"] = "4";  // the steps of operations 0, 4, 8, ..., 40: 11 of 41
  auto r = runRanks("trace_run", 3, o);
  ASSERT_TRUE(r.allOk()) << r.describe();
  const std::string merged = dir + "/merged.json";
  const std::string cmd = std::string(THESEUS_TRACE_TOOL) + " merge -o " + merged + " " + dir + " 2>&1";
  ASSERT_EQ(system(cmd.c_str()), 0);
  auto j = nlohmann::json::parse(readFile(merged));
  EXPECT_EQ(j["theseus"]["ranks"], 3);
  EXPECT_EQ(j["theseus"]["communicators"], 1);
  EXPECT_GE(j["theseus"]["max_clock_error_ns"].get<int64_t>(), 0);
  EXPECT_LT(j["theseus"]["max_clock_error_ns"].get<int64_t>(), 50000000) << "ranks of one host align within 50 ms";
  std::map<int, int> ops, counters;
  std::map<int, std::set<uint64_t>> swaps, stepped;
  std::map<int, std::set<int>> stepPeers;
  for (const auto& e : j["traceEvents"]) {
    const int pid = e["pid"].get<int>();
    if (e["ph"] == "X" && e["cat"] == "operation") ++ops[pid];
    if (e["ph"] == "X" && e["cat"] == "step") {
      stepped[pid].insert(e["args"]["seq"].get<uint64_t>());
      stepPeers[pid].insert(e["args"]["peer"].get<int>());
      EXPECT_EQ(e["tid"].get<int>(), 1 + e["args"]["peer"].get<int>()) << "a step is on its peer's track";
    }
    if (e["ph"] == "C") ++counters[pid];
    if (e["ph"] == "i" && e["name"] == "schedule swap") swaps[pid].insert(e["args"]["from_seq"].get<uint64_t>());
  }
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(ops[rank], 41) << "rank " << rank << ": 40 allreduces and an allgather";
    EXPECT_FALSE(swaps[rank].empty()) << rank;
    EXPECT_EQ(swaps[rank], swaps[0]) << "every rank swapped at the same collectives";
    EXPECT_EQ(stepped[rank], (std::set<uint64_t>{0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40})) << rank;
    EXPECT_EQ(stepPeers[rank], (std::set<int>{(rank + 1) % 3, (rank + 2) % 3})) << rank;
    EXPECT_GT(counters[rank], 0) << "rank " << rank << ": its attributes (rank.<r>.coll_us, ...) as counters";
  }
  if (system("/usr/bin/python3 -c 'import jsonschema' 2>/dev/null") == 0) {
    const std::string check = std::string("/usr/bin/python3 -c \"import json,sys,jsonschema; "
                                          "jsonschema.validate(json.load(open(sys.argv[2])), json.load(open(sys.argv[1])))\" ") +
                              THESEUS_TRACE_SCHEMA + " " + merged + " 2>&1";
    EXPECT_EQ(system(check.c_str()), 0) << "the merged trace does not match " << THESEUS_TRACE_SCHEMA;
    const std::string check1 = std::string("for f in ") + dir + "/theseus-trace.*.json; do /usr/bin/python3 -c \"import "
                               "json,sys,jsonschema; jsonschema.validate(json.load(open(sys.argv[2])), "
                               "json.load(open(sys.argv[1])))\" " + THESEUS_TRACE_SCHEMA + " $f || exit 1; done";
    EXPECT_EQ(system(check1.c_str()), 0) << "a rank's trace does not match the schema";
  } else {
    fprintf(stderr, "python3-jsonschema is not installed: the schema check is skipped\n");
  }
  (void)system(("rm -rf " + dir).c_str());
}
