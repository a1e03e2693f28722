// main() of every *_perf binary; PERF_PROGRAM names the collective
// (set per binary by nccl-tests-compat/CMakeLists.txt).
#include <cstdio>

#include "perf_coll.h"

int main(int argc, char** argv) {
  const theseus::perf::CollectiveTest* test = theseus::perf::findCollective(PERF_PROGRAM);
  if (test == nullptr) {
    fprintf(stderr, "%s: no such collective test\n", PERF_PROGRAM);
    return theseus::perf::kExitUsage;
  }
  return theseus::perf::perfMain(argc, argv, *test);
}
