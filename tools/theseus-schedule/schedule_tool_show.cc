// theseus-schedule show: report formatting (schedule_tool_show.h).
#include "schedule_tool_show.h"

#include <string>

#include "schedule/describe.h"

namespace theseus::tool {
namespace {

using schedule::ChunkRange;
using schedule::Program;
using schedule::Step;

std::string range(const ChunkRange& r) {
  std::string out = std::string(schedule::bufName(r.buf)) + "[" + std::to_string(r.first);
  if (r.count != 1) out += ":" + std::to_string(static_cast<uint64_t>(r.first) + r.count);
  return out + "]";
}

std::string stepText(const Step& s) {
  std::string peers;
  if (schedule::opReceives(s.op)) peers += "from " + std::to_string(s.recvPeer) + " ";
  if (schedule::opSends(s.op)) peers += "to " + std::to_string(s.sendPeer) + " ";
  if (schedule::opReceives(s.op) || schedule::opSends(s.op)) peers += "ch" + std::to_string(s.channel);
  char head[96];
  snprintf(head, sizeof(head), "%-22s %-20s", schedule::opName(s.op), peers.c_str());
  std::string out = head;
  if (schedule::opReadsSrc(s.op)) out += " src " + range(s.src);
  if (schedule::opWritesDst(s.op)) out += " dst " + range(s.dst);
  if (!s.deps.empty()) {
    out += "  deps";
    for (uint32_t d : s.deps) out += " " + std::to_string(d);
  }
  return out;
}

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char text[32];
  snprintf(text, sizeof(text), u ? "%.2f %s" : "%.0f %s", bytes, units[u]);
  return text;
}

}  // namespace

void printSteps(FILE* out, const Program& p) {
  for (int r = 0; r < p.nranks; ++r) {
    const std::vector<Step>& steps = p.ranks[r].steps;
    fprintf(out, "rank %d (%zu steps)\n", r, steps.size());
    for (size_t i = 0; i < steps.size(); ++i) fprintf(out, "  %4zu  %s\n", i, stepText(steps[i]).c_str());
  }
}

void printCost(FILE* out, const Program& p, const schedule::user::CostEstimate& cost, size_t bytes,
               const schedule::user::LinkParams& link) {
  fprintf(out, "\nbytes per link (block = %zu bytes)\n", bytes);
  for (const schedule::user::LinkLoad& l : cost.links)
    fprintf(out, "  %3d -> %-3d %14llu bytes (%s) in %u message(s)\n", l.from, l.to,
            static_cast<unsigned long long>(l.bytes), human(static_cast<double>(l.bytes)).c_str(), l.messages);
  fprintf(out, "  total %llu bytes in %u messages; busiest link %llu bytes\n",
          static_cast<unsigned long long>(cost.totalBytes), cost.messages,
          static_cast<unsigned long long>(cost.maxLinkBytes));
  char local[48] = "free";
  if (link.localGBps > 0) snprintf(local, sizeof(local), "%g GB/s", link.localGBps);
  fprintf(out, "\ncost estimate (alpha %g us, beta %g GB/s, local copies %s): %.3f us\n", link.alphaUs, link.betaGBps,
          local, cost.timeUs);
  if (cost.timeUs > 0 && bytes > 0)
    fprintf(out, "  algorithm bandwidth %.3f GB/s (block bytes / time)\n", static_cast<double>(bytes) / cost.timeUs / 1e3);
  fprintf(out, "  per rank:");
  for (int r = 0; r < p.nranks; ++r) fprintf(out, "%s %d: %.3f", r ? "," : "", r, cost.rankTimeUs[r]);
  fprintf(out, " us\n");
  fprintf(out, "\ncritical path: %zu steps (completion time, time added by the step)\n", cost.criticalPath.size());
  double previous = 0;
  for (const schedule::user::CriticalStep& c : cost.criticalPath) {
    fprintf(out, "  %-68s %10.3f us  +%.3f\n", schedule::stepLabel(p, c.rank, c.step).c_str(), c.endUs,
            c.endUs - previous);
    previous = c.endUs;
  }
}

}  // namespace theseus::tool
