// One scenario of the localization benchmark (`make doctor-bench`, scripts/doctor_bench.py): a
// rank program run under theseus-run, on one host over shared memory or on network-namespace
// hosts over TCP (--netns). Every rank runs the same training-like loop — "compute" (a sleep),
// an allreduce and an alltoall (so every link carries traffic) — healthy for --warm iterations,
// then with the fault for --seconds, then healthy again for --after seconds:
//
//   --fault none            faults come from the environment (THESEUS_EMULATE: a throttled link,
//                           a rank's slow sends, a straggler in compute, one that recovers)
//   --fault tc-link:A:B     traffic control on host A's NIC slows what it sends to host B
//   --fault tc-nic:H        host H's NIC sends slowly (a tbf on its eth0)
//   --fault tc-host:H       every link of host H is slow (its eth0 and its switch port)
//   --fault tc-flap:A:B     the link A -> B is slow for --flap-ms, fine for --flap-ms, ...
//   --fault hang:R          rank R stops (SIGSTOP) in the middle of the loop
//   --fault kill:R          rank R dies (SIGKILL)
//   --fault mismatch:R      rank R calls allgather where the others call allreduce
//   --fault count:R         rank R allreduces 1024 elements fewer
// (several, comma-separated). At the end of the fault phase (or of --after, when given) every
// rank writes its flight recorder to <out>/fr.<rank> (theseusGetFlightRecorder); a rank whose
// collective fails writes it through THESEUS_FLIGHT_RECORDER_DUMP (the script sets it). Rank 0
// writes the doctor.* attributes the leader published during the fault phase and at the end to
// <out>/live.json, and every rank its pid to <out>/pid.<rank> (the script kills a hung rank once
// the others have written their dumps). Iteration counts are agreed through the allreduce itself: rank 0 adds its
// "stop" flag to the first element, so every rank leaves the loop after the same collective.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../../../tools/common/query_text.h"
#include "../adaptive/link_shaper.h"
#include "nccl.h"
#include "theseus/theseus.h"

namespace {

using Clock = std::chrono::steady_clock;
using theseus::tools::queryText;

struct Fault {
  std::string kind;
  int a = -1, b = -1;
};

struct Options {
  std::vector<Fault> faults;
  std::string out = ".";
  std::string rate = "400mbit";
  size_t bytes = 1 << 20;     // allreduce
  size_t a2aBytes = 4 << 20;  // alltoall (whole buffer: every pair gets a share; several slices each)
  int warm = 30;
  double seconds = 6, after = 0;
  int flapMs = 1000;
  int computeUs = 2000;
};

int rank_ = -1, nranks_ = 0;
theseus::bench::LinkShaper shaper_;
ncclComm_t comm_ = nullptr;

// A failed call: abort the communicator as PyTorch's watchdog does (which writes the flight
// recorder to THESEUS_FLIGHT_RECORDER_DUMP, for a rank whose call failed before anything ran).
#define NCCL_OK(call)                                                                                    \
  do {                                                                                                   \
    ncclResult_t r_ = (call);                                                                            \
    if (r_ != ncclSuccess) {                                                                             \
      fprintf(stderr, "[rank %d] %s failed: %s (%s)\n", rank_, #call, ncclGetErrorString(r_),           \
              ncclGetLastError(nullptr));                                                                \
      if (comm_ != nullptr) ncclCommAbort(comm_);                                                        \
      exit(3);                                                                                           \
    }                                                                                                    \
  } while (0)

bool has(const Options& o, const std::string& kind, int rank = -1) {
  for (const Fault& f : o.faults)
    if (f.kind == kind && (rank < 0 || f.a == rank)) return true;
  return false;
}

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream f(path + ".tmp");
  f << text << "\n";
  f.close();
  rename((path + ".tmp").c_str(), path.c_str());
}

// Rank 0: the doctor.* attributes in the leader's store now ({} when none).
std::map<std::string, double> liveVerdict(ncclComm_t comm) {
  std::map<std::string, double> out;
  const std::string text = queryText(comm, theseusListAttributes);
  for (size_t at = text.find("\"doctor."); at != std::string::npos; at = text.find("\"doctor.", at + 1)) {
    const size_t end = text.find('"', at + 1);
    const size_t value = text.find("\"value\":", end);
    if (end == std::string::npos || value == std::string::npos) break;
    out[text.substr(at + 1, end - at - 1)] = atof(text.c_str() + value + 8);
  }
  return out;
}

std::string shape(const Options& o, bool on) {
  if (!on) return shaper_.healAll();
  for (const Fault& f : o.faults) {
    std::string err;
    if (f.kind == "tc-link" || f.kind == "tc-flap") err = shaper_.slowLink(f.a, f.b, o.rate);
    else if (f.kind == "tc-nic") err = shaper_.slowEgress(f.a, o.rate);
    else if (f.kind == "tc-host") err = shaper_.slowHost(f.a, o.rate);
    if (!err.empty()) return err;
  }
  return "";
}

struct Loop {
  ncclComm_t comm;
  std::vector<float> send, recv, a2aSend, a2aRecv;
  size_t count;
};

// One iteration; returns whether rank 0 asked to stop. `i`: the iteration number in the fault phase (-1 outside).
bool iterate(const Options& o, Loop& l, long i, bool stop) {
  std::this_thread::sleep_for(std::chrono::microseconds(o.computeUs));
  if (i >= 20) {  // the fail-stop faults strike in the fault phase's 20th iteration
    if (has(o, "hang", rank_)) raise(SIGSTOP);
    if (has(o, "kill", rank_)) raise(SIGKILL);
  }
  l.send[0] = rank_ == 0 && stop ? 1.0f : 0.0f;
  size_t count = l.count;
  if (i >= 20 && has(o, "count", rank_)) count -= 1024;
  if (i >= 20 && has(o, "mismatch", rank_)) {
    NCCL_OK(ncclAllGather(l.send.data(), l.recv.data(), count / nranks_, ncclFloat, l.comm, nullptr));
  } else {
    NCCL_OK(ncclAllReduce(l.send.data(), l.recv.data(), count, ncclFloat, ncclSum, l.comm, nullptr));
  }
  const bool stopping = l.recv[0] > 0.5f;
  NCCL_OK(ncclAlltoAll(l.a2aSend.data(), l.a2aRecv.data(), l.a2aSend.size() / nranks_, ncclFloat, l.comm, nullptr));
  return stopping;
}

// Runs iterations until rank 0's clock passes `seconds`; rank 0 samples the live verdict.
long phase(const Options& o, Loop& l, double seconds, bool faulty, std::set<std::string>* seen) {
  const auto start = Clock::now();
  auto nextSample = start;
  for (long i = 0;; ++i) {
    const bool stop = std::chrono::duration<double>(Clock::now() - start).count() >= seconds;
    if (iterate(o, l, faulty ? i : -1, stop)) return i + 1;
    if (rank_ == 0 && seen != nullptr && Clock::now() >= nextSample) {
      for (const auto& [name, v] : liveVerdict(l.comm)) seen->insert(name);
      nextSample = Clock::now() + std::chrono::milliseconds(250);
    }
  }
}

void flapper(const Options& o, std::atomic<bool>* stop) {
  bool slow = true;
  while (!stop->load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(o.flapMs));
    slow = !slow;
    if (std::string err = shape(o, slow); !err.empty()) fprintf(stderr, "doctor_bench: %s\n", err.c_str());
  }
}

std::string jsonList(const std::set<std::string>& names) {
  std::string s = "[";
  for (const std::string& n : names) s += (s.size() > 1 ? ",\"" : "\"") + n + "\"";
  return s + "]";
}

int run(const Options& o) {
  writeFile(o.out + "/pid." + std::to_string(rank_), std::to_string(getpid()));  // a hung rank is killed by pid
  Loop l;
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));  // from NCCL_COMM_ID
  NCCL_OK(ncclCommInitRank(&l.comm, nranks_, id, rank_));
  comm_ = l.comm;
  l.count = o.bytes / sizeof(float) / nranks_ * nranks_;
  l.send.assign(l.count, 1.0f);
  l.recv.assign(l.count, 0.0f);
  const size_t a2aCount = o.a2aBytes / sizeof(float) / nranks_ * nranks_;
  l.a2aSend.assign(a2aCount, 1.0f);
  l.a2aRecv.assign(a2aCount, 0.0f);
  for (int i = 0; i < o.warm; ++i) iterate(o, l, -1, false);
  if (rank_ == 0) {
    if (std::string err = shape(o, true); !err.empty()) {
      fprintf(stderr, "doctor_bench: %s\n", err.c_str());
      return 4;
    }
  }
  std::atomic<bool> stopFlap{false};
  std::thread flap;
  if (rank_ == 0 && has(o, "tc-flap")) flap = std::thread(flapper, std::cref(o), &stopFlap);
  std::set<std::string> seen;
  const long iters = phase(o, l, o.seconds, true, &seen);
  const std::map<std::string, double> atEnd = rank_ == 0 ? liveVerdict(l.comm) : std::map<std::string, double>{};
  if (rank_ == 0) {
    stopFlap = true;
    if (flap.joinable()) flap.join();
    if (std::string err = shape(o, false); !err.empty()) fprintf(stderr, "doctor_bench: %s\n", err.c_str());
  }
  if (o.after > 0) phase(o, l, o.after, false, nullptr);
  writeFile(o.out + "/fr." + std::to_string(rank_), queryText(l.comm, theseusGetFlightRecorder));
  if (rank_ == 0) {
    std::set<std::string> endNames;
    for (const auto& [name, v] : atEnd) endNames.insert(name);
    const std::map<std::string, double> after = liveVerdict(l.comm);
    std::set<std::string> afterNames;
    for (const auto& [name, v] : after) afterNames.insert(name);
    writeFile(o.out + "/live.json", "{\"iterations\":" + std::to_string(iters) + ",\"seen\":" + jsonList(seen) +
                                        ",\"at_end\":" + jsonList(endNames) + ",\"after\":" + jsonList(afterNames) +
                                        "}");
    printf("doctor_bench: %ld iterations with the fault; live verdicts seen: %s\n", iters, jsonList(seen).c_str());
  }
  comm_ = nullptr;
  NCCL_OK(ncclCommDestroy(l.comm));
  return 0;
}

int usage(const char* why) {
  fprintf(stderr,
          "doctor_bench: %s\nusage: theseus-run -np N [--netns --hosts ...] -- doctor_bench --out DIR\n"
          "       [--fault KIND[:A[:B]],...] [--seconds S] [--after S] [--warm N] [--bytes B] [--a2a-bytes B]\n"
          "       [--rate 400mbit] [--flap-ms MS] [--compute-us US]\n",
          why);
  return 2;
}

bool parseFaults(const std::string& text, std::vector<Fault>* out) {
  static const std::set<std::string> kKinds = {"none", "tc-link", "tc-nic", "tc-host", "tc-flap",
                                               "hang", "kill",    "mismatch", "count"};
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    Fault f;
    f.kind = item.substr(0, item.find(':'));
    if (kKinds.count(f.kind) == 0) return false;
    const char* args = item.c_str() + f.kind.size();
    if (*args != '\0' && sscanf(args, ":%d:%d", &f.a, &f.b) < 1) return false;
    if (f.kind != "none") out->push_back(f);
    pos = end + 1;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--fault") {
      if (!parseFaults(value(), &o.faults)) return usage("bad --fault");
    } else if (a == "--out") o.out = value();
    else if (a == "--rate") o.rate = value();
    else if (a == "--bytes") o.bytes = strtoull(value().c_str(), nullptr, 0);
    else if (a == "--a2a-bytes") o.a2aBytes = strtoull(value().c_str(), nullptr, 0);
    else if (a == "--warm") o.warm = atoi(value().c_str());
    else if (a == "--seconds") o.seconds = atof(value().c_str());
    else if (a == "--after") o.after = atof(value().c_str());
    else if (a == "--flap-ms") o.flapMs = atoi(value().c_str());
    else if (a == "--compute-us") o.computeUs = atoi(value().c_str());
    else return usage(("unknown argument " + a).c_str());
  }
  const char* r = getenv("THESEUS_RANK");
  const char* n = getenv("THESEUS_NRANKS");
  if (r == nullptr || n == nullptr) return usage("THESEUS_RANK/THESEUS_NRANKS not set: run under theseus-run");
  rank_ = atoi(r);
  nranks_ = atoi(n);
  if (o.bytes < 4096 || o.a2aBytes < 4096 || o.seconds <= 0 || nranks_ < 2) return usage("bad numbers");
  for (const Fault& f : o.faults)
    if (f.kind.rfind("tc-", 0) == 0)
      if (std::string why = shaper_.init(); !why.empty()) return usage(why.c_str());
  return run(o);
}
