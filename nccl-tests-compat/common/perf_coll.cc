#include "perf_coll.h"

#include <cstring>

namespace theseus::perf {

size_t alignedPerRank(size_t count, size_t eltSize, int nranks) {
  size_t align = eltSize >= 16 ? 1 : 16 / eltSize;
  return (count / static_cast<size_t>(nranks)) / align * align;
}

const std::vector<const CollectiveTest*>& allCollectives() {
  static const std::vector<const CollectiveTest*> all = {
      &allReduceTest(), &allGatherTest(), &broadcastTest(), &reduceTest(),  &reduceScatterTest(),
      &alltoallTest(),  &gatherTest(),    &scatterTest(),   &sendrecvTest(), &hypercubeTest(),
  };
  return all;
}

const CollectiveTest* findCollective(const char* program) {
  for (const CollectiveTest* t : allCollectives())
    if (strcmp(t->program(), program) == 0) return t;
  return nullptr;
}

}  // namespace theseus::perf
