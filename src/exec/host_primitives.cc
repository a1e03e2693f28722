#include <cstring>

#include "exec/primitives.h"

namespace theseus::exec {
namespace {

void hostCopy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

}  // namespace

const Primitives& hostPrimitives() {
  static const Primitives p{"host", device::kHostAccessibleKinds, hostCopy, reduce, reduceScaleA, scaleCopy, divide};
  return p;
}

}  // namespace theseus::exec
