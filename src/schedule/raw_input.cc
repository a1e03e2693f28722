#include "schedule/raw_input.h"

#include <map>

#include "schedule/analysis.h"

namespace theseus::schedule {

Result<std::vector<RawInputUse>> rawInputUses(const Program& program, int rank) {
  if (rank < 0 || rank >= static_cast<int>(program.ranks.size()))
    return internalError("program '%s' has no rank %d", program.name.c_str(), rank);
  const auto& steps = program.ranks[rank].steps;
  std::vector<RawInputUse> uses(steps.size());
  if (!isReducing(program.collective)) return uses;  // only reductions scale their input

  // A range is raw input until a step writes it.
  auto key = [&](const ChunkRange& r, uint32_t c) {
    PhysRange p = physicalRange(program, rank, r);
    return std::make_pair(static_cast<int>(p.buf), p.first + c);
  };
  std::map<std::pair<int, uint32_t>, bool> written;
  auto rawState = [&](const ChunkRange& r) -> int {  // 1 all raw, 0 none raw, -1 mixed
    PhysRange p = physicalRange(program, rank, r);
    bool isInputSpace = program.inPlace ? (p.buf != Buf::kScratch) : (r.buf == Buf::kInput);
    if (!isInputSpace) return 0;
    int raw = -2;
    for (uint32_t c = 0; c < r.count; ++c) {
      int v = written.count(key(r, c)) ? 0 : 1;
      if (raw == -2) raw = v;
      else if (raw != v) return -1;
    }
    return raw < 0 ? 0 : raw;
  };

  for (uint32_t s = 0; s < steps.size(); ++s) {
    const Step& st = steps[s];
    if (opReadsSrc(st.op)) {
      int raw = rawState(st.src);
      if (raw < 0)
        return invalidUsage("schedule '%s' rank %d step %u reads a range that is partly raw input and partly "
                            "partial results; split the step",
                            program.name.c_str(), rank, s);
      uses[s].srcIsRawInput = raw == 1;
    }
    if (opWritesDst(st.op)) {
      if (st.op == Op::kReduce) uses[s].dstIsRawInput = rawState(st.dst) == 1;
      for (uint32_t c = 0; c < st.dst.count; ++c) written[key(st.dst, c)] = true;
    }
  }
  return uses;
}

}  // namespace theseus::schedule
