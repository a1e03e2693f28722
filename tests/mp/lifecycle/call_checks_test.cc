// Calls that cannot be right, caught on every rank (issue 14): sizes that do
// not fit in bytes fail at once with ncclInvalidArgument, ranks that call a
// collective inconsistently (collective, count, datatype, op, root) all get an
// error instead of a wrong result, ranks that differ only in in-place-ness get
// the right result (as with NVIDIA's library), and settings that must agree
// between ranks are checked at init.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "lifecycle_util.h"
#include "mp_test.h"

using theseus::test::runRanks;
using theseus::test::SpawnOptions;

namespace {

bool says(const char* what) { return std::string(ncclGetLastError(nullptr)).find(what) != std::string::npos; }

// Every collective and p2p call with a count whose byte size wraps (or exceeds any
// buffer) is refused before anything moves; the communicator stays usable.
THESEUS_RANK_FN(overflowing_counts) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::vector<float> buf(64, 1.0f);
  float* b = buf.data();
  const size_t huge[] = {SIZE_MAX, SIZE_MAX / 4 + 1, size_t(1) << 62, (size_t(1) << 62) + 1, size_t(1) << 61};
  auto start = std::chrono::steady_clock::now();
  for (size_t n : huge) {
    RANK_CHECK(ncclAllReduce(b, b, n, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
    RANK_CHECK(says("more than any buffer can hold"));
    RANK_CHECK(ncclBroadcast(b, b, n, ncclFloat, 0, comm, nullptr) == ncclInvalidArgument);
    RANK_CHECK(ncclReduce(b, b, n, ncclFloat, ncclSum, 0, comm, nullptr) == ncclInvalidArgument);
    RANK_CHECK(ncclAllGather(b, b, n, ncclFloat, comm, nullptr) == ncclInvalidArgument);
    RANK_CHECK(ncclReduceScatter(b, b, n, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
    RANK_CHECK(ncclAlltoAll(b, b, n, ncclFloat, comm, nullptr) == ncclInvalidArgument);
    RANK_CHECK(ncclGather(b, b, n, ncclFloat, 0, comm, nullptr) == ncclInvalidArgument);
    RANK_CHECK(ncclScatter(b, b, n, ncclFloat, 0, comm, nullptr) == ncclInvalidArgument);
    RANK_CHECK(ncclSend(b, n, ncclFloat, (ctx.rank + 1) % ctx.nranks, comm, nullptr) == ncclInvalidArgument);
    RANK_CHECK(ncclRecv(b, n, ncclFloat, (ctx.rank + 1) % ctx.nranks, comm, nullptr) == ncclInvalidArgument);
  }
  // The gathered side counts: 2^61 floats per rank fit in bytes, x ranks do not.
  const size_t perRank = (size_t(1) << 61) / static_cast<size_t>(ctx.nranks) + 1;
  RANK_CHECK(ncclAllGather(b, b, perRank, ncclFloat, comm, nullptr) == ncclInvalidArgument);
  RANK_CHECK(says("ranks is more than any buffer can hold"));
  // A buffer whose end would wrap around the address space.
  RANK_CHECK(ncclAllReduce(reinterpret_cast<void*>(UINTPTR_MAX - 15), b, 8, ncclFloat, ncclSum, comm, nullptr) ==
             ncclInvalidArgument);
  RANK_CHECK(says("wraps around the address space"));
  RANK_CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  RANK_NCCL(ncclAllReduce(b, b, buf.size(), ncclFloat, ncclSum, comm, nullptr));
  for (float v : buf) RANK_CHECK(v == static_cast<float>(ctx.nranks));
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(CallChecks, CountsWhoseBytesDoNotFitAreInvalidArguments) {
  auto r = runRanks("overflowing_counts", 2);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// NCCL_CHECK_POINTERS=1 (in a process without CUDA; with CUDA loaded, buffers CUDA does not know are always
// checked): a buffer that is not readable memory (unmapped, PROT_NONE, its end past a mapping) is refused on the
// rank that passed it before anything moves, not crashed on; a buffer only the root uses may be anything on the
// others; the communicator stays usable.
THESEUS_RANK_FN(unreadable_buffers) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* area = static_cast<char*>(mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  RANK_CHECK(area != MAP_FAILED);
  RANK_CHECK(munmap(area + 2 * page, page) == 0);           // the third page: gone (a freed buffer)
  RANK_CHECK(mprotect(area + page, page, PROT_NONE) == 0);  // the second: no access (reserved address space)
  float* good = reinterpret_cast<float*>(area);
  const size_t n = page / sizeof(float);
  float* unmapped = reinterpret_cast<float*>(area + 2 * page);
  float* noAccess = reinterpret_cast<float*>(area + page);
  RANK_CHECK(ncclAllReduce(unmapped, unmapped, n, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
  RANK_CHECK(says("is neither memory CUDA knows nor readable host memory"));
  RANK_CHECK(says("sendbuff"));
  RANK_CHECK(ncclAllReduce(good, noAccess, n, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
  RANK_CHECK(says("recvbuff"));
  RANK_CHECK(ncclAllGather(good, good, n, ncclFloat, comm, nullptr) == ncclInvalidArgument);  // ends past `good`
  RANK_CHECK(ncclSend(unmapped, 4, ncclFloat, (ctx.rank + 1) % ctx.nranks, comm, nullptr) == ncclInvalidArgument);
  RANK_CHECK(ncclGroupStart() == ncclSuccess);  // in a group: the whole group is refused
  RANK_CHECK(ncclAllReduce(good, good, 4, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  RANK_CHECK(ncclRecv(noAccess, 4, ncclFloat, (ctx.rank + 1) % ctx.nranks, comm, nullptr) == ncclSuccess);
  RANK_CHECK(ncclGroupEnd() == ncclInvalidArgument);
  // Only the root reads a broadcast's input: the others' may be anything.
  for (size_t i = 0; i < 4; ++i) good[i] = ctx.rank == 0 ? 7.0f : 0.0f;
  RANK_NCCL(ncclBroadcast(ctx.rank == 0 ? good : unmapped, good, 4, ncclFloat, 0, comm, nullptr));
  for (size_t i = 0; i < 4; ++i) RANK_CHECK(good[i] == 7.0f);
  for (size_t i = 0; i < n; ++i) good[i] = 1.0f;
  RANK_NCCL(ncclAllReduce(good, good, n, ncclFloat, ncclSum, comm, nullptr));
  for (size_t i = 0; i < n; ++i) RANK_CHECK(good[i] == static_cast<float>(ctx.nranks));
  RANK_NCCL(ncclCommDestroy(comm));
  munmap(area, 2 * page);
  return 0;
}

TEST(CallChecks, BuffersThatAreNotMemoryAreInvalidArgumentsWithCheckPointers) {
  SpawnOptions checked;
  checked.env["NCCL_CHECK_POINTERS"] = "1";
  auto r = runRanks("unreadable_buffers", 2, checked);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// args[0]: which call differs on the last rank ("count", "type", "op", "collective", "allgather", "root"); args[1]: elements.
THESEUS_RANK_FN(inconsistent_calls) {
  const std::string what = ctx.args.at(0);
  const size_t count = std::stoul(ctx.args.at(1));
  const bool odd = ctx.rank == ctx.nranks - 1;
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::vector<float> buf(count, 1.0f);
  auto start = std::chrono::steady_clock::now();
  ncclResult_t r;
  if (what == "count") {
    r = ncclAllReduce(buf.data(), buf.data(), odd ? count / 2 : count, ncclFloat, ncclSum, comm, nullptr);
  } else if (what == "type") {
    r = ncclAllReduce(buf.data(), buf.data(), count, odd ? ncclInt32 : ncclFloat, ncclSum, comm, nullptr);
  } else if (what == "op") {
    r = ncclAllReduce(buf.data(), buf.data(), count, ncclFloat, odd ? ncclMax : ncclSum, comm, nullptr);
  } else if (what == "collective") {
    // Same bytes on the wire per rank would not save it: a reduce-scatter is not an allreduce.
    std::vector<float> out(count);
    r = odd ? ncclReduceScatter(buf.data(), out.data(), count / static_cast<size_t>(ctx.nranks), ncclFloat, ncclSum,
                                comm, nullptr)
            : ncclAllReduce(buf.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr);
  } else if (what == "allgather") {
    std::vector<float> out(count * static_cast<size_t>(ctx.nranks));
    r = ncclAllGather(buf.data(), out.data(), odd ? count / 2 : count, ncclFloat, comm, nullptr);
  } else {
    // Ranks whose own view of the call is complete and consistent (the root as they see it
    // sent to them) may succeed, with the root's data; nobody may succeed with other data.
    const int root = odd ? 1 : 0;
    for (float& v : buf) v = static_cast<float>(ctx.rank + 1);
    r = ncclBroadcast(buf.data(), buf.data(), count, ncclFloat, root, comm, nullptr);
    if (r == ncclSuccess) {
      for (float v : buf)
        if (v != static_cast<float>(root + 1)) {
          fprintf(stderr, "rank %d: broadcast returned success with wrong data (%g)\n", ctx.rank, v);
          return 1;
        }
      // The rank that saw the mismatch reports it: the next call fails, naming the broadcast.
      r = ncclAllReduce(buf.data(), buf.data(), count, ncclFloat, ncclSum, comm, nullptr);
      if (r == ncclSuccess) {
        fprintf(stderr, "rank %d: the call after the inconsistent broadcast succeeded\n", ctx.rank);
        return 1;
      }
      fprintf(stderr, "rank %d (next call): %s\n", ctx.rank, ncclGetLastError(comm));
    } else {
      fprintf(stderr, "rank %d: %s\n", ctx.rank, ncclGetLastError(comm));
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (r == ncclSuccess) {
    fprintf(stderr, "rank %d: %s mismatch returned success\n", ctx.rank, what.c_str());
    return 1;
  }
  if (getenv("THESEUS_TEST_VERBOSE") != nullptr) fprintf(stderr, "rank %d: %s\n", ctx.rank, ncclGetLastError(comm));
  if (s > 20) {
    fprintf(stderr, "rank %d: the error took %.1f s: %s\n", ctx.rank, s, ncclGetLastError(comm));
    return 1;
  }
  ncclCommAbort(comm);
  return 0;
}

void expectEveryRankFails(const char* what, size_t count, int nranks) {
  SpawnOptions o;
  o.args = {what, std::to_string(count)};
  o.env["THESEUS_STALL_TIMEOUT_MS"] = "60000";
  auto r = runRanks("inconsistent_calls", nranks, o);
  EXPECT_TRUE(r.allOk()) << what << " x " << count << ": " << r.describe();
}

TEST(CallChecks, MismatchedCountsFailOnEveryRank) {
  expectEveryRankFails("count", 1 << 20, 2);
  expectEveryRankFails("count", 1 << 20, 3);
  expectEveryRankFails("count", 64, 3);
  expectEveryRankFails("allgather", 4096, 3);
}

TEST(CallChecks, MismatchedDatatypesFailOnEveryRank) { expectEveryRankFails("type", 1 << 16, 3); }

TEST(CallChecks, MismatchedOpsFailOnEveryRank) {
  expectEveryRankFails("op", 16, 3);
  expectEveryRankFails("op", 1 << 18, 2);
}

TEST(CallChecks, MismatchedCollectivesFailOnEveryRank) {
  expectEveryRankFails("collective", 48, 3);
  expectEveryRankFails("collective", 3 << 18, 3);
}

// In-place-ness is each rank's own business in NVIDIA's library (sendbuff == recvbuff is a local
// fact), so ranks that differ in it must get the right result, not an error: the odd ranks run
// every collective in place, the others out of place, for each schedule that serves it.
THESEUS_RANK_FN(mixed_in_place) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  const size_t n = ctx.nranks;
  const bool inPlace = ctx.rank % 2 == 1;
  const int root = static_cast<int>(n) - 1;
  for (size_t count : {size_t(5), size_t(70000)}) {
    auto val = [&](size_t rank, size_t i) { return static_cast<float>((rank + 1) * 3 + i % 7); };
    std::vector<float> big(count * n), in(count * n), out(count * n);
    auto fill = [&](std::vector<float>& v, size_t elems) {
      for (size_t i = 0; i < elems; ++i) v[i] = val(ctx.rank, i);
    };
    // allreduce
    fill(in, count);
    float* dst = inPlace ? in.data() : out.data();
    RANK_NCCL(ncclAllReduce(in.data(), dst, count, ncclFloat, ncclSum, comm, nullptr));
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (size_t r = 0; r < n; ++r) want += val(r, i);
      RANK_CHECK(dst[i] == want);
    }
    // reduce-scatter: in place, the input is the whole buffer and the result lands in this rank's block
    fill(in, count * n);
    dst = inPlace ? in.data() + ctx.rank * count : out.data();
    RANK_NCCL(ncclReduceScatter(in.data(), dst, count, ncclFloat, ncclSum, comm, nullptr));
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (size_t r = 0; r < n; ++r) want += val(r, ctx.rank * count + i);
      RANK_CHECK(dst[i] == want);
    }
    // allgather: in place, the input is this rank's block of the output
    std::fill(big.begin(), big.end(), -1.0f);
    float* src = inPlace ? big.data() + ctx.rank * count : in.data();
    for (size_t i = 0; i < count; ++i) src[i] = val(ctx.rank, i);
    RANK_NCCL(ncclAllGather(src, big.data(), count, ncclFloat, comm, nullptr));
    for (size_t r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) RANK_CHECK(big[r * count + i] == val(r, i));
    // broadcast and reduce from the last rank
    fill(in, count);
    dst = inPlace ? in.data() : out.data();
    RANK_NCCL(ncclBroadcast(in.data(), dst, count, ncclFloat, root, comm, nullptr));
    for (size_t i = 0; i < count; ++i) RANK_CHECK(dst[i] == val(root, i));
    fill(in, count);
    RANK_NCCL(ncclReduce(in.data(), dst, count, ncclFloat, ncclMax, root, comm, nullptr));
    if (ctx.rank == root)
      for (size_t i = 0; i < count; ++i) RANK_CHECK(dst[i] == val(n - 1, i));
  }
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(CallChecks, RanksMayDifferInInPlaceness) {
  for (const char* schedule : {"", "ring", "double_binary_tree", "recursive_doubling", "halving_doubling", "direct"}) {
    for (int nranks : {2, 3, 4}) {
      SpawnOptions o;
      if (*schedule != 0) o.env["THESEUS_SCHEDULE"] = schedule;
      o.env["THESEUS_STALL_TIMEOUT_MS"] = "20000";
      auto r = runRanks("mixed_in_place", nranks, o);
      EXPECT_TRUE(r.allOk()) << (*schedule ? schedule : "default") << " on " << nranks << " ranks: " << r.describe();
    }
  }
}

TEST(CallChecks, BroadcastWithDifferentRootsFailsOnEveryRank) {
  for (const char* schedule : {"ring", "double_binary_tree", "direct"}) {
    for (size_t count : {size_t(16), size_t(1) << 20}) {
      SpawnOptions o;
      o.args = {"root", std::to_string(count)};
      o.env["THESEUS_STALL_TIMEOUT_MS"] = "60000";
      o.env["THESEUS_SCHEDULE"] = schedule;
      auto r = runRanks("inconsistent_calls", 3, o);
      EXPECT_TRUE(r.allOk()) << schedule << " x " << count << ": " << r.describe();
    }
  }
}

// args[0]: the variable, args[1]: rank 0's value, args[2]: the other ranks' value, args[3]: "fail" or "ok".
THESEUS_RANK_FN(settings_differ) {
  setenv(ctx.args.at(0).c_str(), (ctx.rank == 0 ? ctx.args.at(1) : ctx.args.at(2)).c_str(), 1);
  ncclComm_t comm;
  ncclResult_t r = ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank);
  if (ctx.args.at(3) == "ok") {
    RANK_NCCL(r);
    RANK_NCCL(ncclCommDestroy(comm));
    return 0;
  }
  RANK_CHECK(r == ncclInvalidUsage);
  const std::string why = ncclGetLastError(nullptr);
  if (why.find(ctx.args.at(0) + " differs between ranks") == std::string::npos) {
    fprintf(stderr, "rank %d: %s\n", ctx.rank, why.c_str());
    return 1;
  }
  return 0;
}

TEST(CallChecks, SettingsThatMustAgreeAreCheckedAtInit) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"THESEUS_SLICE_BYTES", "131072", "65536", "fail"},
                                                                {"THESEUS_SHM_SLOT_BYTES", "262144", "131072", "fail"},
                                                                {"NCCL_BUFFSIZE", "4194304", "1048576", "fail"},
                                                                {"THESEUS_SLICE_BYTES", "128K", "131072", "ok"},
                                                                // Checked before the transports are set up, which
                                                                // it decides (device FIFOs or not).
                                                                {"THESEUS_DEVICE_EXECUTOR", "auto", "off", "fail"},
                                                                {"THESEUS_DEVICE_EXECUTOR", "emulate", "off", "fail"},
                                                                {"THESEUS_DEVICE_EXECUTOR", "AUTO", "auto", "ok"}}) {
    SpawnOptions o;
    o.args = args;
    auto r = runRanks("settings_differ", 3, o);
    EXPECT_TRUE(r.allOk()) << args[0] << " " << args[1] << "/" << args[2] << ": " << r.describe();
  }
}

// Settings that cannot do what they say get one WARN instead of silence (issue 14, item 10):
// args[0] is the text the rank's log (NCCL_DEBUG_FILE, args[1]) must show after init and a collective.
THESEUS_RANK_FN(warns_about_setting) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::vector<float> buf(4096, 1.0f);
  RANK_NCCL(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr));
  RANK_NCCL(ncclCommDestroy(comm));
  if (ctx.rank != 0) return 0;
  FILE* f = fopen((ctx.args.at(1) + "." + std::to_string(getpid())).c_str(), "r");
  RANK_CHECK(f != nullptr);
  std::string text;
  char line[4096];
  while (fgets(line, sizeof(line), f) != nullptr) text += line;
  fclose(f);
  if (text.find(ctx.args.at(0)) == std::string::npos || text.find("WARN") == std::string::npos) {
    fprintf(stderr, "no WARN with '%s' in:\n%s\n", ctx.args.at(0).c_str(), text.c_str());
    return 1;
  }
  return 0;
}

TEST(CallChecks, SettingsThatCannotWorkAreWarnedAbout) {
  const std::vector<std::vector<std::string>> cases = {
      {"THESEUS_SCHEDULE", "no_such_schedule", "no schedule is named 'no_such_schedule'"},
      {"THESEUS_SCHEDULES", "/nonexistent/schedules.json", "THESEUS_SCHEDULES: "},
      {"THESEUS_EMULATE", "throttle:0->7:10%", "names rank 7, but the communicator has 2 rank(s)"},
      {"THESEUS_SLICE_BYTES", "0", "THESEUS_SLICE_BYTES=0 is below the smallest slice"},
  };
  for (const auto& c : cases) {
    SpawnOptions o;
    const std::string log = "/tmp/theseus-warns-" + std::to_string(getpid());
    o.env[c[0]] = c[1];
    o.env["NCCL_DEBUG"] = "WARN";
    o.env["NCCL_DEBUG_FILE"] = log + ".%p";
    o.args = {c[2], log};
    auto r = runRanks("warns_about_setting", 2, o);
    EXPECT_TRUE(r.allOk()) << c[0] << "=" << c[1] << ": " << r.describe();
    (void)!system(("rm -f " + log + ".*").c_str());
  }
}

// kill -9 of one rank while everyone runs collectives: every survivor fails, and every one of
// them names the rank that died first (issue 14, item 8) - not a neighbour that failed after it.
// args[0]: the rank to kill.
THESEUS_RANK_FN(one_rank_killed) {
  const int victim = std::stoi(ctx.args.at(0));
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::vector<float> buf(1 << 18, 1.0f);
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < 200000 && r == ncclSuccess; ++i) {
    if (ctx.rank == victim && i == 20) raise(SIGKILL);
    r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
  }
  RANK_CHECK(r != ncclSuccess);
  const std::string why = ncclGetLastError(comm);
  // The first root cause named is the victim's: "rank <victim> (<host> pid <pid>) failed first".
  const size_t cause = why.find(" failed first");
  const size_t named = why.find("rank " + std::to_string(victim) + " (");
  if (cause == std::string::npos || named == std::string::npos || named > cause ||
      why.substr(named, cause - named).find("rank ", 1) != std::string::npos) {
    fprintf(stderr, "rank %d blames: %s\n", ctx.rank, why.c_str());
    return 1;
  }
  ncclCommAbort(comm);
  return 0;
}

TEST(Blame, SurvivorsNameTheRankThatDiedFirst) {
  for (const char* transport : {"auto", "socket"}) {
    for (int trial = -1; trial < 3; ++trial) {  // victims 0 (the leader) .. 3
      SpawnOptions o;
      o.env["THESEUS_TRANSPORT"] = transport;
      o.args = {std::to_string(1 + trial)};
      auto r = runRanks("one_rank_killed", 4, o);
      ASSERT_EQ(r.exitCodes.size(), 4u) << r.describe();
      for (size_t i = 0; i < r.exitCodes.size(); ++i) {
        const int expected = r.ranks[i] == 1 + trial ? 128 + SIGKILL : 0;
        EXPECT_EQ(r.exitCodes[i], expected) << transport << ", rank " << r.ranks[i] << ": " << r.describe();
      }
    }
  }
}

// Two jobs started with the same NCCL_COMM_ID (issue 14, item 6): no rank may succeed in a
// communicator that mixes them. args[0]: the job's tag; each rank's allreduce must give 2 x tag.
THESEUS_RANK_FN(job_with_shared_comm_id) {
  const float tag = std::stof(ctx.args.at(0));
  ncclUniqueId id;
  RANK_NCCL(ncclGetUniqueId(&id));
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, ctx.nranks, id, ctx.rank) != ncclSuccess) {
    fprintf(stderr, "init failed: %s\n", ncclGetLastError(nullptr));
    return 3;  // refused: fine
  }
  std::vector<float> buf(256, tag);
  ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
  if (r == ncclSuccess)
    for (float v : buf)
      if (v != 2 * tag) {
        fprintf(stderr, "a mixed communicator: %g\n", v);
        return 1;
      }
  ncclCommAbort(comm);
  return r == ncclSuccess ? 0 : 3;
}

// Label "faults" (make test-faults), not make test: in one CI run a rank 0 of the losing job was
// still in ncclCommInitRank after 60 s (not reproduced in 4 local runs; under investigation).
TEST(CallChecks, TwoJobsWithOneCommIdNeverMix) {
  if (getenv("THESEUS_TEST_FAULTS") == nullptr) GTEST_SKIP() << "a fault test: make test-faults runs it";
  for (int trial = 0; trial < 4; ++trial) {
    const std::string commId = "127.0.0.1:" + std::to_string(lifecycle_test::freeLoopbackPort());
    theseus::test::SpawnResult a, b;
    auto job = [&](const char* tag, theseus::test::SpawnResult* out) {
      SpawnOptions o;
      o.createUniqueId = false;
      o.env["NCCL_COMM_ID"] = commId;
      o.env["THESEUS_BOOTSTRAP_TIMEOUT_MS"] = "2000";
      o.args = {tag};
      o.timeoutSec = 60;
      *out = runRanks("job_with_shared_comm_id", 2, o);
    };
    std::thread ta(job, "1", &a), tb(job, "100", &b);
    ta.join();
    tb.join();
    for (const auto* r : {&a, &b}) {
      EXPECT_FALSE(r->timedOut) << r->describe();
      for (int code : r->exitCodes) EXPECT_TRUE(code == 0 || code == 3) << "trial " << trial << ": " << r->describe();
    }
  }
}

}  // namespace
