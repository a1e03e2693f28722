#include "transport/shm/device_inbox.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/log.h"
#include "device/cuda_driver.h"

namespace theseus::transport {
namespace {

constexpr const char* kPrefix = "cudaipc";

struct Parsed {
  int pid = 0;
  uint64_t cookie = 0;
  int device = -1;
  uint64_t bytes = 0;
  uint64_t address = 0;
  device::CudaDriver::IpcHandle handle{};
};

// "cudaipc:<pid>:<cookie>:<device>:<bytes>:<address>:<handle as 128 hex digits>"
bool parse(const std::string& text, Parsed* out) {
  char hex[129] = {0};
  int pid = 0, dev = -1, consumed = 0;
  unsigned long long cookie = 0, bytes = 0, address = 0;
  if (sscanf(text.c_str(), "cudaipc:%d:%llx:%d:%llu:%llx:%128[0-9a-f]%n", &pid, &cookie, &dev, &bytes, &address, hex,
             &consumed) != 6 ||
      static_cast<size_t>(consumed) != text.size() || strlen(hex) != 128 || pid <= 0 || dev < 0 || bytes == 0)
    return false;
  for (int i = 0; i < 64; ++i) {
    unsigned v = 0;
    sscanf(hex + 2 * i, "%2x", &v);
    out->handle.bytes[i] = static_cast<unsigned char>(v);
  }
  out->pid = pid;
  out->cookie = cookie;
  out->device = dev;
  out->bytes = bytes;
  out->address = address;
  return true;
}

}  // namespace

Result<std::unique_ptr<DeviceInbox>> DeviceInbox::create(size_t bytes, size_t zeroFrom, int pid,
                                                         uint64_t processCookie) {
  const device::CudaDriver* cuda = device::CudaDriver::get();
  if (cuda == nullptr) return invalidUsage("the CUDA driver is not loaded");
  if (!cuda->hasIpc()) return invalidUsage("the CUDA driver has no IPC entry points");
  const int dev = cuda->currentDevice();
  if (dev < 0) return invalidUsage("no CUDA device is current on the calling thread");
  std::unique_ptr<DeviceInbox> in(new DeviceInbox());
  void* p = nullptr;
  TH_ASSIGN(p, cuda->alloc(bytes));
  in->base_ = static_cast<char*>(p);
  in->device_ = dev;
  if (zeroFrom < bytes) {  // at set-up, before any peer learns of the area
    const std::vector<char> zeros(bytes - zeroFrom, 0);
    TH_CHECK(cuda->copyToDeviceOn(in->base_ + zeroFrom, zeros.data(), zeros.size(), nullptr));
    TH_CHECK(cuda->synchronize(nullptr).withContext("zeroing device FIFO control blocks"));
  }
  in->pid_ = pid;
  in->cookie_ = processCookie;
  device::CudaDriver::IpcHandle h;
  TH_ASSIGN(h, cuda->ipcExport(p));  // ~DeviceInbox frees the area on failure
  char head[160];
  snprintf(head, sizeof(head), "%s:%d:%" PRIx64 ":%d:%zu:%" PRIxPTR ":", kPrefix, pid, processCookie, dev, bytes,
           reinterpret_cast<uintptr_t>(p));
  in->locator_ = head;
  for (unsigned char c : h.bytes) {
    char two[3];
    snprintf(two, sizeof(two), "%02x", c);
    in->locator_ += two;
  }
  return in;
}

DeviceInbox::~DeviceInbox() {
  const device::CudaDriver* cuda = device::CudaDriver::get();
  if (cuda == nullptr) return;
  for (const Peer& p : peers_)
    if (p.imported) {
      Status s = cuda->ipcClose(p.base);
      if (!s.isOk()) TH_INFO(log::kShm, "closing rank %d's device FIFO memory: %s", p.rank, s.message().c_str());
    }
  if (base_ != nullptr) {
    Status s = cuda->free(base_);
    if (!s.isOk()) TH_INFO(log::kShm, "freeing the device FIFO memory: %s", s.message().c_str());
  }
}

Status DeviceInbox::openPeer(int rank, const std::string& locator, size_t needBytes) {
  Parsed p;
  if (!parse(locator, &p)) return remoteError("rank %d published a malformed device FIFO locator", rank);
  if (p.bytes < needBytes)
    return remoteError("rank %d's device FIFO memory has %" PRIu64 " bytes, its FIFOs need %zu", rank, p.bytes,
                       needBytes);
  Peer peer;
  peer.rank = rank;
  if (p.pid == pid_ && p.cookie == cookie_) {
    // A thread of this process: its address is valid here; on another device it
    // needs peer access from this rank's context (NVLink or PCIe P2P), which
    // also lets this rank's kernels read that rank's registered buffers.
    if (p.device != device_) {
      Status s = device::CudaDriver::get()->enablePeerAccess(p.device);
      if (!s.isOk())
        return s.withContext("rank " + std::to_string(rank) + " is a thread of this process on CUDA device " +
                             std::to_string(p.device) + ", this rank uses device " + std::to_string(device_));
    }
    peer.base = reinterpret_cast<char*>(static_cast<uintptr_t>(p.address));
  } else {
    void* mapped = nullptr;
    TH_ASSIGN(mapped, device::CudaDriver::get()->ipcOpen(p.handle));
    peer.base = static_cast<char*>(mapped);
    peer.imported = true;
  }
  peers_.push_back(peer);
  return Status::ok();
}

char* DeviceInbox::peerBase(int rank) const {
  for (const Peer& p : peers_)
    if (p.rank == rank) return p.base;
  return nullptr;
}

}  // namespace theseus::transport
