// The flight recorder with real ranks: what theseusGetFlightRecorder returns, the dump a stall
// timeout writes (THESEUS_FLIGHT_RECORDER_DUMP) naming what the stuck operation waits for, the
// SIGUSR1 dump, and theseus-doctor's verdict on the dumps of a job where a rank never arrived.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "mp_test.h"
#include "test_files.h"
#include "theseus/theseus.h"

using theseus::test::readFile;
using theseus::test::runRanks;
using theseus::test::SpawnOptions;

namespace {

std::string recorderOf(ncclComm_t comm) {
  size_t needed = 0;
  if (theseusGetFlightRecorder(comm, nullptr, 0, &needed) != ncclSuccess) return "";
  std::string text(needed, '\0');
  if (theseusGetFlightRecorder(comm, text.data(), text.size(), &needed) != ncclSuccess) return "";
  text.resize(text.find('\0') == std::string::npos ? text.size() : text.find('\0'));
  return text;
}

}  // namespace

// Allreduces and a grouped send/recv ring: every one is in the recorder, done, in order.
THESEUS_RANK_FN(fr_api) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::vector<float> a(1000, 1.0f), b(1000);
  for (int i = 0; i < 5; ++i) RANK_NCCL(ncclAllReduce(a.data(), b.data(), a.size(), ncclFloat, ncclSum, comm, nullptr));
  RANK_NCCL(ncclGroupStart());
  RANK_NCCL(ncclSend(a.data(), 10, ncclFloat, (ctx.rank + 1) % ctx.nranks, comm, nullptr));
  RANK_NCCL(ncclRecv(b.data(), 10, ncclFloat, (ctx.rank + ctx.nranks - 1) % ctx.nranks, comm, nullptr));
  RANK_NCCL(ncclGroupEnd());
  auto j = nlohmann::json::parse(recorderOf(comm));
  RANK_CHECK(j["format"] == 1 && j["rank"] == ctx.rank && j["nranks"] == ctx.nranks);
  const auto& e = j["entries"];
  RANK_CHECK(e.size() == 6);
  for (int i = 0; i < 5; ++i) {
    RANK_CHECK(e[i]["op"] == "allreduce" && e[i]["state"] == "done" && e[i]["count"] == 1000 && e[i]["dtype"] == "float");
    RANK_CHECK(e[i]["seq"] == i && e[i]["end_ns"].get<uint64_t>() >= e[i]["start_ns"].get<uint64_t>());
  }
  RANK_CHECK(e[5]["op"] == "send/recv" && e[5]["state"] == "done" && e[5]["count"] == 20);
  // The doctor's evidence: every rank's host, the traffic with the ring neighbours, the attributes.
  RANK_CHECK(j["host_of"].size() == static_cast<size_t>(ctx.nranks) && j["host_of"][ctx.rank] == 0);
  bool next = false;
  for (const auto& p : j["peers"])
    next = next || (p["peer"] == (ctx.rank + 1) % ctx.nranks && p["bytes_sent"].get<uint64_t>() > 0);
  RANK_CHECK(next);
  RANK_CHECK(j["attributes"]["format"] == 1 && j["attributes"]["rank"] == ctx.rank && j["attributes"]["a"].is_array());
  RANK_CHECK(j["created_ns"].get<uint64_t>() <= e[0]["start_ns"].get<uint64_t>());
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(FlightRecorder, EveryOperationIsRecordedInOrder) {
  auto r = runRanks("fr_api", 3);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// Rank 1 runs 3 allreduces and then stops calling (it sleeps, then writes its recorder through
// SIGUSR1); the others' fourth allreduce times out and the failure writes their dumps.
THESEUS_RANK_FN(fr_stall) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::vector<float> a(1 << 16, 1.0f);
  for (int i = 0; i < 3; ++i) RANK_NCCL(ncclAllReduce(a.data(), a.data(), a.size(), ncclFloat, ncclSum, comm, nullptr));
  if (ctx.rank == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    raise(SIGUSR1);  // THESEUS_FLIGHT_RECORDER_SIGUSR1=1: a thread writes the dump
    const std::string mine = ctx.args.at(0) + "/fr." + std::to_string(ctx.rank);
    for (int i = 0; i < 500 && access(mine.c_str(), F_OK) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    RANK_CHECK(access(mine.c_str(), F_OK) == 0);
    ncclCommAbort(comm);
    return 0;
  }
  ncclResult_t r = ncclAllReduce(a.data(), a.data(), a.size(), ncclFloat, ncclSum, comm, nullptr);
  RANK_CHECK(r != ncclSuccess);
  ncclCommAbort(comm);
  return 0;
}

TEST(FlightRecorder, AStallDumpsWhatEachRankWaitsForAndTheDoctorNamesTheRank) {
  const std::string dir = theseus::test::makeTempDir("theseus-fr");
  ASSERT_FALSE(dir.empty());
  SpawnOptions o;
  o.env["THESEUS_STALL_TIMEOUT_MS"] = "1000";
  o.env["THESEUS_FLIGHT_RECORDER_DUMP"] = dir + "/fr.%r";
  o.env["THESEUS_FLIGHT_RECORDER_SIGUSR1"] = "1";
  o.env["THESEUS_SCHEDULE"] = "ring";
  o.args = {dir};
  auto r = runRanks("fr_stall", 4, o);
  ASSERT_TRUE(r.allOk()) << r.describe();
  for (int rank : {0, 2, 3}) {
    auto j = nlohmann::json::parse(readFile(dir + "/fr." + std::to_string(rank)));
    const auto& last = j["entries"].back();
    EXPECT_EQ(last["seq"], 3) << rank;
    EXPECT_EQ(last["state"], "failed") << rank;
    EXPECT_NE(last.value("error", "").find("no progress"), std::string::npos) << last.dump();
    EXPECT_NE(last.value("waiting", "").find("waits for"), std::string::npos) << last.dump();
  }
  // Rank 1 saw its SIGUSR1 dump appear before it aborted; the abort's dump then replaced it.
  auto one = nlohmann::json::parse(readFile(dir + "/fr.1"));
  EXPECT_TRUE(one["reason"] == "SIGUSR1" || one["reason"] == "ncclCommAbort") << one["reason"];
  EXPECT_EQ(one["entries"].back()["seq"], 2);
  EXPECT_EQ(one["entries"].back()["state"], "done");
  // The doctor reads the four dumps and names rank 1.
  const std::string out = dir + "/doctor.json";
  const std::string cmd = std::string(THESEUS_DOCTOR) + " --json " + dir + "/fr.0 " + dir + "/fr.1 " + dir + "/fr.2 " +
                          dir + "/fr.3 > " + out + " 2>&1";
  ASSERT_EQ(system(cmd.c_str()), 0) << readFile(out);
  auto verdict = nlohmann::json::parse(readFile(out));
  ASSERT_FALSE(verdict["findings"].empty()) << verdict.dump(1);
  const auto& f = verdict["findings"][0];
  EXPECT_EQ(f["kind"], "never_arrived") << verdict.dump(1);
  EXPECT_EQ(f["ranks"], nlohmann::json::array({1})) << verdict.dump(1);
  fprintf(stderr, "%s\n", verdict.dump(1).c_str());
  (void)system(("rm -rf " + dir).c_str());
}
