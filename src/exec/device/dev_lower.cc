#include "exec/device/dev_lower.h"

#include "exec/reduce_kernels.h"

namespace theseus::exec::dev {

Reduction toDevice(const exec::Reduction& r) {
  Reduction d;
  d.kind = static_cast<uint8_t>(r.kind);
  d.type = static_cast<uint8_t>(r.type);
  d.preMul = r.preMul ? 1 : 0;
  d.divideAtEnd = r.divideAtEnd ? 1 : 0;
  d.divisor = r.divisor;
  kernels::ScaleArg s = kernels::scaleArgFor(r);
  d.scaleF = s.f;
  d.scaleD = s.d;
  d.scaleU = s.u;
  return d;
}

}  // namespace theseus::exec::dev
