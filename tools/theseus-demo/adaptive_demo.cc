// One rank of the adaptive demo that `make run` starts (scripts/demo.sh, four
// ranks under theseus-run). A training-like loop of allreduces over one
// gradient buffer; THESEUS_EMULATE throttles a link for the middle part of the
// run (the script sets it); rank 0 prints, per phase, the time per step and
// the bus bandwidth, the link throughput rank 0 measured, every decision table
// that took effect (at which collective, which schedule, and why), and a
// one-line summary the script puts next to the other policy's. With --out DIR,
// every rank writes its flight recorder at the end of the degraded phase to
// DIR/<label>.fr.<rank> (what theseus-doctor reads), and rank 0 writes the
// bus bandwidth of every step to DIR/<label>.steps and the first schedule
// swap of the degraded phase to DIR/<label>.swap (the script plots them).
//
// Usage (normally through scripts/demo.sh):
//   theseus-demo [--bytes N] [--steps A,B,C] [--compute-ms M] [--label text] [--out DIR]
//     --steps A,B,C  A healthy steps, then B steps with the link degraded, then C healed;
//                    THESEUS_EMULATE's window should be seq=A-(A+B) to match
//     --compute-ms M the "forward and backward pass" of each step: M ms of
//                    sleep before its allreduce (the policy's ages and dwell
//                    are in milliseconds, so the loop should take real time)
// Environment: THESEUS_RANK/THESEUS_NRANKS (or RANK/WORLD_SIZE) and NCCL_COMM_ID.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../common/query_text.h"
#include "../common/rank_env.h"
#include "nccl.h"
#include "theseus/theseus.h"

namespace {

using theseus::tools::envInt;
using theseus::tools::queryText;

using theseus::tools::ncclOk;

struct Options {
  size_t bytes = 8 << 20;
  int steps[3] = {30, 60, 40};
  int computeMs = 0;
  std::string label = "demo";
  std::string out;  // "" : no files
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bytes" && i + 1 < argc) {
      o->bytes = strtoull(argv[++i], nullptr, 10);
    } else if (a == "--steps" && i + 1 < argc) {
      if (sscanf(argv[++i], "%d,%d,%d", &o->steps[0], &o->steps[1], &o->steps[2]) != 3) return false;
    } else if (a == "--compute-ms" && i + 1 < argc) {
      o->computeMs = atoi(argv[++i]);
      if (o->computeMs < 0 || o->computeMs > 10000) return false;
    } else if (a == "--label" && i + 1 < argc) {
      o->label = argv[++i];
    } else if (a == "--out" && i + 1 < argc) {
      o->out = argv[++i];
    } else {
      return false;
    }
  }
  return o->bytes >= 1024 && o->steps[0] > 0 && o->steps[1] >= 0 && o->steps[2] > 0;
}

// A JSON string field of one decision-log line (the log is our own format: no escapes but \" and \\).
std::string field(const std::string& line, const std::string& key) {
  std::string pat = "\"" + key + "\":";
  size_t p = line.find(pat);
  if (p == std::string::npos) return "";
  p += pat.size();
  if (line[p] != '"') return line.substr(p, line.find_first_of(",}", p) - p);
  std::string out;
  for (++p; p < line.size() && line[p] != '"'; ++p) {
    if (line[p] == '\\' && p + 1 < line.size()) ++p;
    out += line[p];
  }
  return out;
}

// The allreduce schedule of the large-message range of one decision-log line.
std::string allreduceSchedule(const std::string& line, size_t bytes) {
  std::string best;
  size_t pos = 0;
  while ((pos = line.find("{\"collective\":\"allreduce\"", pos)) != std::string::npos) {
    size_t end = line.find('}', pos);
    std::string range = line.substr(pos, end - pos + 1);
    unsigned long long lo = strtoull(field(range, "min").c_str(), nullptr, 10);
    if (lo <= bytes) {
      std::string params = field(range, "params");
      best = field(range, "schedule") + (params.empty() ? "" : "(" + params + ")");
    }
    pos = end;
  }
  return best;
}

void printDecisions(ncclComm_t comm, size_t bytes) {
  std::string log = queryText(comm, theseusGetDecisionLog);
  printf("  decision tables that took effect (the same on every rank):\n");
  std::string previous;
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    std::string line = log.substr(start, end - start);
    start = end == std::string::npos ? log.size() : end + 1;
    std::string sched = allreduceSchedule(line, bytes);
    std::string reason = field(line, "reason");
    printf("    at collective #%-5s v%-3s allreduce %s%s%s\n      why: %s\n", field(line, "seq").c_str(),
           field(line, "version").c_str(), previous.empty() ? "" : (previous + " -> ").c_str(), sched.c_str(),
           previous == sched && !previous.empty() ? " (unchanged for this size)" : "", reason.c_str());
    previous = sched;
  }
}

// The first collective in [from, to) at which the large-message allreduce
// schedule changed, or -1.
int firstSwapIn(ncclComm_t comm, size_t bytes, int from, int to) {
  std::string log = queryText(comm, theseusGetDecisionLog), previous;
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    std::string line = log.substr(start, end - start);
    start = end == std::string::npos ? log.size() : end + 1;
    std::string sched = allreduceSchedule(line, bytes);
    int seq = atoi(field(line, "seq").c_str());
    if (!previous.empty() && sched != previous && seq >= from && seq < to) return seq;
    previous = sched;
  }
  return -1;
}

void writeFile(const std::string& path, const std::string& content) {
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr) {
    fprintf(stderr, "theseus-demo: cannot write %s: %s\n", path.c_str(), strerror(errno));
    return;
  }
  fwrite(content.data(), 1, content.size(), f);
  fclose(f);
}

double linkGbps(ncclComm_t comm, const char* name) {
  double v = 0;
  int set = 0;
  if (theseusGetAttribute(comm, name, &v, &set) != ncclSuccess || !set) return -1;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse(argc, argv, &opt)) {
    fprintf(stderr,
            "usage: theseus-demo [--bytes N] [--steps healthy,degraded,healed] [--compute-ms M] [--label text] "
            "[--out DIR]\n");
    return 2;
  }
  const int rank = envInt("THESEUS_RANK", "RANK");
  const int nranks = envInt("THESEUS_NRANKS", "WORLD_SIZE");
  if (rank < 0 || nranks < 2 || rank >= nranks || getenv("NCCL_COMM_ID") == nullptr) {
    fprintf(stderr, "theseus-demo: set THESEUS_RANK, THESEUS_NRANKS (>= 2) and NCCL_COMM_ID (theseus-run does)\n");
    return 2;
  }
  ncclUniqueId id;
  ncclComm_t comm;
  if (!ncclOk(ncclGetUniqueId(&id), "ncclGetUniqueId", rank) ||
      !ncclOk(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank", rank))
    return 1;
  const size_t count = opt.bytes / sizeof(float);
  std::vector<float> grad(count, 1.0f);
  const char* phaseName[3] = {"healthy", "degraded", "healed"};
  std::vector<double> stepSec;
  double linkSeen[3] = {-1, -1, -1};
  int step = 0;
  for (int phase = 0; phase < 3; ++phase) {
    for (int i = 0; i < opt.steps[phase]; ++i, ++step) {
      if (opt.computeMs > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt.computeMs));
      for (float& g : grad) g = 1.0f;  // the "backward pass" writes fresh gradients
      auto t0 = std::chrono::steady_clock::now();
      if (!ncclOk(ncclAllReduce(grad.data(), grad.data(), count, ncclFloat32, ncclSum, comm, nullptr), "ncclAllReduce",
              rank))
        return 1;
      stepSec.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (grad[count / 2] != static_cast<float>(nranks)) {
        fprintf(stderr, "[rank %d] step %d: wrong result %g\n", rank, step, grad[count / 2]);
        return 1;
      }
    }
    linkSeen[phase] = linkGbps(comm, "link.0.1.gbps");
    if (phase == 1 && !opt.out.empty())  // the degraded phase, for theseus-doctor
      writeFile(opt.out + "/" + opt.label + ".fr." + std::to_string(rank),
                queryText(comm, theseusGetFlightRecorder));
  }
  if (rank == 0) {
    printf("== %s: %d ranks, allreduce of %.1f MiB per step\n", opt.label.c_str(), nranks, opt.bytes / 1048576.0);
    printf("  %-9s %-9s %12s %12s %18s\n", "phase", "steps", "ms/allreduce", "busbw GB/s", "link 0->1 GB/s");
    // Time per allreduce (compute excluded) over steps [first, last].
    auto busbwOf = [&](int first, int last, double* perMs) {
      double sec = 0;
      for (int s = first; s <= last; ++s) sec += stepSec[s];
      double per = last >= first ? sec / (last - first + 1) : 0;
      *perMs = per * 1e3;
      return per > 0 ? 2.0 * (nranks - 1) / nranks * double(opt.bytes) / per / 1e9 : 0;
    };
    double busbw[3];
    for (int p = 0; p < 3; ++p) {
      int first = p == 0 ? 0 : (p == 1 ? opt.steps[0] : opt.steps[0] + opt.steps[1]);
      double perMs = 0;
      busbw[p] = busbwOf(first, first + opt.steps[p] - 1, &perMs);
      char range[32];
      snprintf(range, sizeof(range), "%d-%d", first, first + opt.steps[p] - 1);
      char link[32] = "-";
      if (linkSeen[p] >= 0) snprintf(link, sizeof(link), "%.2f", linkSeen[p]);
      printf("  %-9s %-9s %12.1f %12.2f %18s\n", phaseName[p], range, perMs, busbw[p], link);
      // The degraded phase after the first change of schedule in it, if any.
      int swap = p == 1 ? firstSwapIn(comm, opt.bytes, first, first + opt.steps[p]) : -1;
      if (swap > first && swap < first + opt.steps[p]) {
        double bw = busbwOf(swap, first + opt.steps[p] - 1, &perMs);
        snprintf(range, sizeof(range), "%d-%d", swap, first + opt.steps[p] - 1);
        printf("   (after the swap at #%d: %-9s %6.1f %12.2f)\n", swap, range, perMs, bw);
      }
    }
    printDecisions(comm, opt.bytes);
    if (!opt.out.empty()) {
      std::string steps = "# step busbw_GBps\n";
      for (size_t s = 0; s < stepSec.size(); ++s) {
        double perMs = 0;
        steps += std::to_string(s) + " " + std::to_string(busbwOf(static_cast<int>(s), static_cast<int>(s), &perMs)) + "\n";
      }
      writeFile(opt.out + "/" + opt.label + ".steps", steps);
      writeFile(opt.out + "/" + opt.label + ".swap",
                std::to_string(firstSwapIn(comm, opt.bytes, opt.steps[0], opt.steps[0] + opt.steps[1])) + "\n");
    }
    printf("SUMMARY %s %.3f %.3f %.3f\n", opt.label.c_str(), busbw[0], busbw[1], busbw[2]);
    fflush(stdout);
  }
  if (!ncclOk(ncclCommDestroy(comm), "ncclCommDestroy", rank)) return 1;
  return 0;
}
