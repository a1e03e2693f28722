// Writes programs as version-1 JSON schedules (json_schedule.h), one step per
// line so the result stays readable and diffable. parseJsonSchedule reads the
// output back to the same programs (a unit test round-trips every built-in).
#include <nlohmann/json.hpp>
#include <string>

#include "schedule/user/json_schedule.h"

namespace theseus::schedule::user {
namespace {

// Bytes that are not UTF-8 (an MSCCL file's text) become U+FFFD: the JSON library throws on them otherwise.
std::string quote(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string rangeJson(const ChunkRange& r) {
  std::string out = std::string(bufName(r.buf)) + "[" + std::to_string(r.first);
  if (r.count != 1) out += ":" + std::to_string(static_cast<uint64_t>(r.first) + r.count);
  return quote(out + "]");
}

std::string stepJson(const Step& s) {
  std::string out = "{\"op\": " + quote(opName(s.op));
  const bool recvs = opReceives(s.op), sends = opSends(s.op);
  if (recvs && sends) {
    out += ", \"recv_peer\": " + std::to_string(s.recvPeer) + ", \"send_peer\": " + std::to_string(s.sendPeer);
  } else if (recvs || sends) {
    out += ", \"peer\": " + std::to_string(recvs ? s.recvPeer : s.sendPeer);
  }
  if (opReadsSrc(s.op)) out += ", \"src\": " + rangeJson(s.src);
  if (opWritesDst(s.op)) out += ", \"dst\": " + rangeJson(s.dst);
  if (s.channel != 0) out += ", \"channel\": " + std::to_string(s.channel);
  if (!s.deps.empty()) {
    out += ", \"deps\": [";
    for (size_t i = 0; i < s.deps.size(); ++i) out += (i ? ", " : "") + std::to_string(s.deps[i]);
    out += "]";
  }
  return out + "}";
}

std::string layoutJson(Layout l) {
  switch (l) {
    case Layout::kOutOfPlace: return "false";
    case Layout::kInPlace: return "true";
    case Layout::kBoth: return "\"both\"";
  }
  return "false";
}

// The fields and ranks of one program, indented by `pad`.
std::string programBody(const FixedProgram& fp, const std::string& pad) {
  const Program& p = fp.program;
  std::string out;
  out += pad + "\"nranks\": " + std::to_string(p.nranks) + ",\n";
  if (isRooted(p.collective)) out += pad + "\"root\": " + std::to_string(p.root) + ",\n";
  out += pad + "\"chunks_per_block\": " + std::to_string(p.chunksPerBlock) + ",\n";
  out += pad + "\"scratch_blocks\": " + std::to_string(p.scratchBlocks) + ",\n";
  out += pad + "\"channels\": " + std::to_string(p.nchannels) + ",\n";
  out += pad + "\"in_place\": " + layoutJson(fp.layout) + ",\n";
  out += pad + "\"ranks\": [\n";
  for (int r = 0; r < p.nranks; ++r) {
    const std::vector<Step>& steps = p.ranks[r].steps;
    out += pad + "  {\"rank\": " + std::to_string(r) + ", \"steps\": [";
    for (size_t i = 0; i < steps.size(); ++i) out += std::string(i ? "," : "") + "\n" + pad + "    " + stepJson(steps[i]);
    out += steps.empty() ? "]}" : "\n" + pad + "  ]}";
    out += r + 1 < p.nranks ? ",\n" : "\n";
  }
  out += pad + "]";
  return out;
}

}  // namespace

std::string programsToJson(const std::string& name, Collective collective, const std::string& description,
                           const std::vector<FixedProgram>& programs) {
  std::string out = "{\n";
  out += "  \"version\": " + std::to_string(kJsonFormatVersion) + ",\n";
  out += "  \"name\": " + quote(name) + ",\n";
  out += "  \"collective\": " + quote(collectiveName(collective)) + ",\n";
  if (!description.empty()) out += "  \"description\": " + quote(description) + ",\n";
  if (programs.size() == 1) {
    out += programBody(programs[0], "  ") + "\n}\n";
    return out;
  }
  out += "  \"programs\": [\n";
  for (size_t i = 0; i < programs.size(); ++i) {
    out += "    {\n" + programBody(programs[i], "      ") + "\n    }";
    out += i + 1 < programs.size() ? ",\n" : "\n";
  }
  out += "  ]\n}\n";
  return out;
}

}  // namespace theseus::schedule::user
