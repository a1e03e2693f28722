// GPUDirect RDMA through dma-buf: device memory handed to an RDMA NIC's
// driver as a file descriptor, so the NIC reads (or writes) GPU memory over
// PCIe without a copy through host memory.
//
// The driver exports a page-aligned range of one device allocation as a
// dma-buf (cuMemGetHandleForAddressRange, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD);
// offset 0 of the descriptor is the range's first byte. A network registers
// it (ibv_reg_dmabuf_mr, or a net plugin's regMrDmaBuf) and may close its copy
// of the descriptor afterwards: the registration holds the pages. This needs
// Linux 5.12 or later, a driver with dma-buf support (the device attribute
// says) and a NIC driver that imports dma-bufs; where any of them is missing,
// supported() is false or the export fails, and callers keep host staging.
#pragma once

#include <cstddef>

#include "common/status.h"

namespace theseus::device {

class DmaBuf {
 public:
  // True when the loaded driver exports dma-bufs of device `dev`'s memory (false without a driver).
  static bool supported(int dev);
  // The range's dma-buf descriptor, which the caller closes. [p, p + bytes) must be page-aligned and lie
  // in one allocation of device `dev` (exported in that device's primary context, from any thread).
  static Result<int> exportRange(const void* p, size_t bytes, int dev);
};

}  // namespace theseus::device
