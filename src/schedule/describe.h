// Text for schedule diagnostics, shared by the structure checks and the
// verifier so every message names things the same way:
//   "rank 2 step 5 (recv_reduce_send from rank 1 to rank 3, channel 0)"
//   "output chunks [4,6)"
#pragma once

#include <cstdint>
#include <string>

#include "schedule/ir.h"

namespace theseus::schedule {

std::string stepLabel(const Program& p, int rank, uint32_t index);
std::string rangeText(const ChunkRange& r);
// "schedule ring allreduce nranks=4 in-place" (the prefix of verifier errors).
std::string programLabel(const Program& p);

}  // namespace theseus::schedule
