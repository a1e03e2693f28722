#include "schedule/describe.h"

#include <cstdio>

namespace theseus::schedule {

std::string stepLabel(const Program& p, int rank, uint32_t index) {
  std::string out = "rank " + std::to_string(rank) + " step " + std::to_string(index);
  if (rank < 0 || static_cast<size_t>(rank) >= p.ranks.size() || index >= p.ranks[rank].steps.size()) return out;
  const Step& s = p.ranks[rank].steps[index];
  out += " (";
  out += opName(s.op);
  if (opReceives(s.op)) out += " from rank " + std::to_string(s.recvPeer);
  if (opSends(s.op)) out += " to rank " + std::to_string(s.sendPeer);
  if (opReceives(s.op) || opSends(s.op)) out += ", channel " + std::to_string(s.channel);
  out += ")";
  return out;
}

std::string rangeText(const ChunkRange& r) {
  char text[96];
  if (r.count == 1)
    snprintf(text, sizeof(text), "%s chunk %u", bufName(r.buf), r.first);
  else
    snprintf(text, sizeof(text), "%s chunks [%u,%llu)", bufName(r.buf), r.first,
             static_cast<unsigned long long>(r.first) + r.count);
  return text;
}

std::string programLabel(const Program& p) {
  std::string out = "schedule " + (p.name.empty() ? std::string("(unnamed)") : p.name) + " " +
                    collectiveName(p.collective) + " nranks=" + std::to_string(p.nranks);
  if (isRooted(p.collective)) out += " root=" + std::to_string(p.root);
  if (p.inPlace) out += " in-place";
  return out;
}

}  // namespace theseus::schedule
