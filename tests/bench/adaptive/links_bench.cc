// Adaptivity on real degraded links (`make bench-adaptive`, scripts/bench-adaptive.sh):
// one rank per network-namespace host (theseus-run --netns -np 4), TCP between
// them, links slowed by the kernel's traffic control (link_shaper.h), never by
// Theseus' own emulation. Every scenario runs on two fresh communicators split
// from the same world, a static one (THESEUS_POLICY=static) and an adaptive
// one (the policy given, policies/adaptive.json by default), so both see the
// same links and the same machine load:
//
//   slow-link  link 0 -> 1 at --rate from the first byte; then healed
//   slow-host  every link of host 2 at --rate; then healed
//   flap       link 0 -> 1 slow for --flap-ms, fine for --flap-ms, for --flap-seconds
//
// Per scenario and size it reports, from rank 0's clock:
//   busbw      static and adaptive while degraded (alternating pairs), the ratio
//   reaction   ms and collectives from the fault to the first collective that
//              ran another table (adaptive collectives only, back to back)
//   swaps      tables that took effect while the fault lasted
//   slow after collectives after the first swap at >= 3/4 of static's pace
//   back       ms from healing to the first collective on the initial table
//   logs       whether the adaptive decision logs are identical on every rank
// and a RESULT line of JSON per scenario for the script (LINKS_BENCH_REASONS=1: each
// table's reason from the decision log too). --check: exit 1 when
// a goal fails (ratio >= --min-ratio on slow-link, at most --max-swaps while
// degraded, back within --max-back-ms of healing, identical logs; flap: no more
// swaps than min_dwell_ms allows). Defaults: issue 15's goals (2.46x, 2, 2 s).
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../../mp/epoch/adaptive_common.h"
#include "link_shaper.h"
#include "nccl.h"
#include "theseus/theseus.h"

namespace {

using Clock = std::chrono::steady_clock;
using theseus::test::LoggedTable;

struct Options {
  std::vector<size_t> sizes = {16u << 20, 64u << 20};
  std::vector<std::string> scenarios = {"slow-link", "slow-host", "flap"};
  std::string rate = "400mbit";
  std::string policy;
  int pairs = 5;
  int flapMs = 2000;
  int flapSeconds = 16;
  double minRatio = 2.46;
  int maxSwaps = 2;       // while a fault lasts
  int maxBackMs = 2000;   // after healing
  int dwellMs = 1000;  // the policy's min_dwell_ms (for the flap bound)
  bool check = false;
};

int rank_ = -1, nranks_ = 0;
ncclComm_t world_;
theseus::bench::LinkShaper shaper_;

#define NCCL_OK(call)                                                                                  \
  do {                                                                                                 \
    ncclResult_t r_ = (call);                                                                          \
    if (r_ != ncclSuccess) {                                                                           \
      fprintf(stderr, "[rank %d] %s failed: %s (%s)\n", rank_, #call, ncclGetErrorString(r_),         \
              ncclGetLastError(nullptr));                                                              \
      exit(1);                                                                                         \
    }                                                                                                  \
  } while (0)

size_t parseSize(const std::string& s) {
  char* end = nullptr;
  double v = strtod(s.c_str(), &end);
  size_t mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1 << 10;
  else if (*end == 'M' || *end == 'm') mult = 1 << 20;
  else if (*end == 'G' || *end == 'g') mult = size_t{1} << 30;
  return static_cast<size_t>(v * static_cast<double>(mult));
}

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double busbw(size_t bytes, double sec) {
  return sec > 0 ? 2.0 * (nranks_ - 1) / nranks_ * static_cast<double>(bytes) / sec / 1e9 : 0;
}

// Rank 0 decides, every rank follows.
int agree(int value) {
  NCCL_OK(ncclBroadcast(&value, &value, 1, ncclInt32, 0, world_, nullptr));
  return value;
}

void barrier() {
  int x = 0;
  NCCL_OK(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, world_, nullptr));
}

// Rank 0 shapes; everyone learns whether it worked.
void shape(const std::string& what, const std::string& err) {
  int failed = agree(rank_ == 0 && !err.empty() ? 1 : 0);
  if (failed) {
    if (rank_ == 0) fprintf(stderr, "links_bench: %s: %s\n", what.c_str(), err.c_str());
    exit(1);
  }
}

ncclComm_t split(const std::string& policy) {
  setenv("THESEUS_POLICY", policy.c_str(), 1);
  ncclComm_t c;
  NCCL_OK(ncclCommSplit(world_, 0, rank_, &c, nullptr));
  unsetenv("THESEUS_POLICY");
  return c;
}

uint64_t nextSeq(ncclComm_t c) {
  uint64_t s = 0;
  theseusGetEpochInfo(c, &s, nullptr, nullptr);
  return s;
}

struct Timed {
  uint64_t seq;
  double startSec;  // since the scenario's fault
  double sec;
};

struct Comm {
  ncclComm_t comm;
  std::vector<float> buf;
  Timed run(Clock::time_point origin) {
    Timed t{nextSeq(comm), seconds(origin, Clock::now()), 0};
    auto t0 = Clock::now();
    NCCL_OK(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr));
    t.sec = seconds(t0, Clock::now());
    return t;
  }
};

bool sameTable(const LoggedTable& a, const LoggedTable& b) { return a.schedule == b.schedule && a.order == b.order; }

uint64_t fnv(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool logsIdentical(ncclComm_t c) {
  std::vector<uint64_t> all(nranks_);
  uint64_t mine = fnv(theseus::test::decisionLogOf(c));
  NCCL_OK(ncclAllGather(&mine, all.data(), 1, ncclUint64, world_, nullptr));
  int same = 1;
  for (uint64_t h : all) same &= h == all[0];
  return agree(same) != 0;
}

struct Result {
  std::string scenario;
  size_t bytes = 0;
  double staticBusbw = 0, adaptiveBusbw = 0;
  double reactionMs = -1;
  long reactionColls = -1;
  int swaps = 0;
  int slowAfter = 0;
  double backMs = -1;
  bool logs = false;
  int flapSwaps = -1, flapBound = -1;
  std::string tables;
};

std::string describeTables(const std::vector<LoggedTable>& tables) {
  std::string out;
  for (const auto& t : tables) {
    std::string order;
    for (int x : t.order) order += (order.empty() ? "" : ",") + std::to_string(x);
    out += (out.empty() ? "" : " ") + std::string("#") + std::to_string(t.seq) + ":" + t.schedule +
           (order.empty() ? "" : "(" + order + ")");
    if (getenv("LINKS_BENCH_REASONS") != nullptr) out += " [" + t.reason + "]\n           ";
  }
  return out;
}

int tablesIn(const std::vector<LoggedTable>& tables, uint64_t from, uint64_t to) {
  int n = 0;
  for (const auto& t : tables) n += t.seq >= from && t.seq < to && t.version > 1;
  return n;
}

// slow-link and slow-host: fault, reaction, steady state, heal, way back.
Result degradedThenHealed(const Options& o, const std::string& scenario, size_t bytes) {
  Result res;
  res.scenario = scenario;
  res.bytes = bytes;
  Comm fixed{split("static"), std::vector<float>(bytes / sizeof(float), 1.f)};
  Comm adapt{split(o.policy), std::vector<float>(bytes / sizeof(float), 1.f)};
  auto origin = Clock::now();
  for (int i = 0; i < 5; ++i) {  // healthy: both learn what the links achieve, leases settle
    fixed.run(origin);
    adapt.run(origin);
  }
  barrier();
  const uint64_t faultSeq = nextSeq(adapt.comm);
  shape(scenario, rank_ != 0 ? "" : scenario == "slow-link" ? shaper_.slowLink(0, 1, o.rate)
                                                           : shaper_.slowHost(2, o.rate));
  const auto faultAt = Clock::now();
  // Reaction: adaptive collectives back to back until another table took effect.
  std::vector<Timed> adaptive;
  for (int i = 0; i < 30; ++i) {
    adaptive.push_back(adapt.run(faultAt));
    auto tables = theseus::test::allreduceTables(theseus::test::decisionLogOf(adapt.comm), bytes);
    const auto* now = theseus::test::tableAt(tables, adaptive.back().seq);
    int swapped = now != nullptr && !sameTable(*now, tables.front());
    if (agree(swapped)) {
      res.reactionMs = adaptive.back().startSec * 1e3;
      res.reactionColls = static_cast<long>(adaptive.back().seq - faultSeq);
      break;
    }
  }
  // Steady state, alternating.
  std::vector<double> s, a;
  for (int i = 0; i < o.pairs; ++i) {
    s.push_back(fixed.run(faultAt).sec);
    adaptive.push_back(adapt.run(faultAt));
    a.push_back(adaptive.back().sec);
  }
  res.staticBusbw = busbw(bytes, median(s));
  res.adaptiveBusbw = busbw(bytes, median(a));
  const uint64_t healSeq = nextSeq(adapt.comm);
  shape("heal", rank_ == 0 ? shaper_.healAll() : "");
  const auto healAt = Clock::now();
  for (int i = 0; i < 400; ++i) {
    Timed t = adapt.run(faultAt);
    auto tables = theseus::test::allreduceTables(theseus::test::decisionLogOf(adapt.comm), bytes);
    const auto* now = theseus::test::tableAt(tables, t.seq);
    int back = now != nullptr && sameTable(*now, tables.front());
    if (agree(back)) {
      res.backMs = (t.startSec - seconds(faultAt, healAt)) * 1e3;
      break;
    }
    if (agree(seconds(healAt, Clock::now()) > 30)) break;
  }
  auto tables = theseus::test::allreduceTables(theseus::test::decisionLogOf(adapt.comm), bytes);
  res.swaps = tablesIn(tables, faultSeq, healSeq);
  const double slowPace = 0.75 * median(s);
  for (const Timed& t : adaptive)
    if (res.reactionColls >= 0 && t.seq > faultSeq + static_cast<uint64_t>(res.reactionColls) && t.sec >= slowPace)
      ++res.slowAfter;
  res.tables = describeTables(tables);
  res.logs = logsIdentical(adapt.comm);
  NCCL_OK(ncclCommDestroy(adapt.comm));
  NCCL_OK(ncclCommDestroy(fixed.comm));
  return res;
}

// flap: link 0 -> 1 slow and fine in turns while both communicators alternate.
Result flapping(const Options& o, size_t bytes) {
  Result res;
  res.scenario = "flap";
  res.bytes = bytes;
  Comm fixed{split("static"), std::vector<float>(bytes / sizeof(float), 1.f)};
  Comm adapt{split(o.policy), std::vector<float>(bytes / sizeof(float), 1.f)};
  auto origin = Clock::now();
  for (int i = 0; i < 2; ++i) {
    fixed.run(origin);
    adapt.run(origin);
  }
  barrier();
  const uint64_t fromSeq = nextSeq(adapt.comm);
  std::atomic<bool> stop{false};
  std::string flapError;
  std::thread flapper;
  if (rank_ == 0) {
    flapper = std::thread([&] {
      bool slow = false;
      while (!stop.load()) {
        flapError = slow ? shaper_.healAll() : shaper_.slowLink(0, 1, o.rate);
        if (!flapError.empty()) return;
        slow = !slow;
        std::this_thread::sleep_for(std::chrono::milliseconds(o.flapMs));
      }
    });
  }
  const auto start = Clock::now();
  std::vector<double> s, a;
  while (!agree(seconds(start, Clock::now()) > o.flapSeconds)) {
    s.push_back(fixed.run(start).sec);
    a.push_back(adapt.run(start).sec);
  }
  const double elapsed = seconds(start, Clock::now());
  const uint64_t toSeq = nextSeq(adapt.comm);
  if (rank_ == 0) {
    stop = true;
    flapper.join();
  }
  shape("flap", rank_ == 0 ? (flapError.empty() ? shaper_.healAll() : flapError) : "");
  res.staticBusbw = busbw(bytes, median(s));
  res.adaptiveBusbw = busbw(bytes, median(a));
  auto tables = theseus::test::allreduceTables(theseus::test::decisionLogOf(adapt.comm), bytes);
  res.flapSwaps = tablesIn(tables, fromSeq, toSeq + 1);
  res.flapBound = static_cast<int>(std::ceil(elapsed * 1e3 / o.dwellMs));
  res.tables = describeTables(tables);
  res.logs = logsIdentical(adapt.comm);
  NCCL_OK(ncclCommDestroy(adapt.comm));
  NCCL_OK(ncclCommDestroy(fixed.comm));
  return res;
}

// The goals of a result; "" when all hold.
std::string failedGoals(const Options& o, const Result& r) {
  std::string out;
  auto fail = [&](const std::string& what) { out += (out.empty() ? "" : "; ") + what; };
  if (!r.logs) fail("decision logs differ between ranks");
  if (r.scenario == "flap") {
    if (r.flapSwaps > r.flapBound) fail("more swaps than min_dwell allows");
    return out;
  }
  if (r.reactionColls < 0) fail("never swapped");
  if (r.swaps > o.maxSwaps) fail("more than " + std::to_string(o.maxSwaps) + " swaps while degraded");
  if (r.backMs < 0 || r.backMs > o.maxBackMs)
    fail("not back on the initial table within " + std::to_string(o.maxBackMs) + " ms of healing");
  if (r.scenario == "slow-link" && r.adaptiveBusbw < o.minRatio * r.staticBusbw) fail("ratio below the goal");
  return out;
}

void report(const Options& o, const Result& r) {
  const std::string failed = failedGoals(o, r);
  printf("%-9s %5zu MiB  static %7.3f GB/s  adaptive %7.3f GB/s  x%.2f", r.scenario.c_str(), r.bytes >> 20,
         r.staticBusbw, r.adaptiveBusbw, r.staticBusbw > 0 ? r.adaptiveBusbw / r.staticBusbw : 0.0);
  if (r.scenario == "flap") {
    printf("  swaps %d (dwell allows %d)", r.flapSwaps, r.flapBound);
  } else {
    printf("  reaction %.0f ms / %ld coll  swaps %d  slow after %d  back %.0f ms", r.reactionMs, r.reactionColls,
           r.swaps, r.slowAfter, r.backMs);
  }
  printf("  logs %s  %s\n    tables: %s\n", r.logs ? "identical" : "DIFFER", failed.empty() ? "ok" : failed.c_str(),
         r.tables.c_str());
  printf("RESULT {\"scenario\":\"%s\",\"bytes\":%zu,\"static_busbw\":%.4f,\"adaptive_busbw\":%.4f,\"reaction_ms\":%.1f,"
         "\"reaction_collectives\":%ld,\"swaps\":%d,\"slow_after_swap\":%d,\"back_ms\":%.1f,\"flap_swaps\":%d,"
         "\"flap_bound\":%d,\"logs_identical\":%s,\"goals\":\"%s\"}\n",
         r.scenario.c_str(), r.bytes, r.staticBusbw, r.adaptiveBusbw, r.reactionMs, r.reactionColls, r.swaps,
         r.slowAfter, r.backMs, r.flapSwaps, r.flapBound, r.logs ? "true" : "false",
         failed.empty() ? "ok" : failed.c_str());
  fflush(stdout);
}

int usage(const char* why) {
  fprintf(stderr,
          "links_bench: %s\nusage: theseus-run -np 4 --netns -- adaptive_links_bench [--sizes 16M,64M]\n"
          "       [--scenarios slow-link,slow-host,flap] [--rate 400mbit] [--policy FILE] [--pairs N]\n"
          "       [--flap-ms MS] [--flap-seconds S] [--min-ratio X] [--max-swaps N] [--max-back-ms MS]\n"
          "       [--dwell-ms MS] [--check]\n",
          why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.policy = THESEUS_SOURCE_DIR "/policies/adaptive.json";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--sizes") {
      o.sizes.clear();
      for (const std::string& s : theseus::bench::splitCsv(value().c_str())) o.sizes.push_back(parseSize(s));
    } else if (a == "--scenarios") o.scenarios = theseus::bench::splitCsv(value().c_str());
    else if (a == "--rate") o.rate = value();
    else if (a == "--policy") o.policy = value();
    else if (a == "--pairs") o.pairs = atoi(value().c_str());
    else if (a == "--flap-ms") o.flapMs = atoi(value().c_str());
    else if (a == "--flap-seconds") o.flapSeconds = atoi(value().c_str());
    else if (a == "--min-ratio") o.minRatio = atof(value().c_str());
    else if (a == "--dwell-ms") o.dwellMs = atoi(value().c_str());
    else if (a == "--max-swaps") o.maxSwaps = atoi(value().c_str());
    else if (a == "--max-back-ms") o.maxBackMs = atoi(value().c_str());
    else if (a == "--check") o.check = true;
    else return usage(("unknown argument " + a).c_str());
  }
  for (size_t s : o.sizes)
    if (s < 4) return usage("bad --sizes");
  for (const std::string& s : o.scenarios)
    if (s != "slow-link" && s != "slow-host" && s != "flap") return usage(("unknown scenario " + s).c_str());
  if (o.pairs < 1 || o.flapMs < 100 || o.flapSeconds < 1 || o.dwellMs < 1) return usage("bad numbers");
  const char* r = getenv("THESEUS_RANK");
  const char* n = getenv("THESEUS_NRANKS");
  if (r == nullptr || n == nullptr) return usage("THESEUS_RANK/THESEUS_NRANKS not set: run under theseus-run");
  rank_ = atoi(r);
  nranks_ = atoi(n);
  if (std::string why = shaper_.init(); !why.empty()) return usage(why.c_str());
  if (shaper_.hosts() != nranks_ || nranks_ < 4)
    return usage("needs one rank per host and at least 4 hosts (theseus-run -np 4 --netns)");
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));  // from NCCL_COMM_ID
  NCCL_OK(ncclCommInitRank(&world_, nranks_, id, rank_));
  if (rank_ == 0)
    printf("adaptivity on real links: %d hosts over TCP, degraded links at %s, policy %s\n", nranks_, o.rate.c_str(),
           o.policy.c_str());
  int failures = 0;
  for (size_t bytes : o.sizes) {
    for (const std::string& s : o.scenarios) {
      Result res = s == "flap" ? flapping(o, bytes) : degradedThenHealed(o, s, bytes);
      if (rank_ == 0) report(o, res);
      if (rank_ == 0) failures += !failedGoals(o, res).empty();
    }
  }
  NCCL_OK(ncclCommDestroy(world_));
  return o.check && failures > 0 ? 1 : 0;
}
