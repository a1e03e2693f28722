// Host side of the device executor: turning the executor's host structures
// into the plain data the interpreter reads (device/host emulation alike).
#pragma once

#include "exec/device/dev_math.h"
#include "exec/reduce.h"

namespace theseus::exec::dev {

// The device form of a resolved reduction (its scalar converted to the
// element type exactly as the host kernels convert it).
Reduction toDevice(const exec::Reduction& r);

}  // namespace theseus::exec::dev
