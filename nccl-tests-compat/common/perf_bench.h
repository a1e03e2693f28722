// The measurement loops run by every worker thread, in nccl-tests' order:
// for each run cycle, datatype, operation and root: warm up at the largest and
// smallest size, then for each size an out-of-place and an in-place
// measurement, each followed by the -c data checks.
#pragma once

#include <vector>

#include "perf_context.h"

namespace theseus::perf {

Status runBenchmarks(ThreadCtx& t);
// True for (type, op) pairs that `-o all` leaves out (fp8 avg and mulsum).
bool skippedByAll(const Options& o, ncclDataType_t type, OpKind op);

}  // namespace theseus::perf
