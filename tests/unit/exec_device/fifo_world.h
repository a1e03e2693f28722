// Test fixtures of the device interpreter's tests: FIFOs in plain memory with
// the shared-memory layout, the one TransportManager call the lowering makes,
// and a team of host threads standing in for a thread block.
#pragma once

#include <barrier>
#include <cstring>
#include <memory>
#include <vector>

#include "exec/device/dev_plan.h"
#include "transport/fifo_layout.h"
#include "transport/transport_manager.h"

namespace theseus::exec {

// FIFOs for every (sender, receiver, channel) in plain memory, and the
// tables of zero-copy reads (transport/shm/device_exports.h): what each rank
// exported, and per (sender, receiver) the receiver's acks and mappings —
// identity mappings, the ranks being threads of this process.
class FifoWorld {
 public:
  static constexpr int kChannels = 8;
  static constexpr uint32_t kEntries = dev::kMaxExports;
  FifoWorld(int nranks, uint32_t slots, size_t slotBytes)
      : n_(nranks), slots_(slots), slotBytes_(slotBytes), exports_(nranks),
        acks_(static_cast<size_t>(nranks) * nranks * kEntries, 0),
        imports_(static_cast<size_t>(nranks) * nranks * kEntries) {
    for (int i = 0; i < n_ * n_ * kChannels; ++i) {
      auto f = std::make_unique<Storage>();
      f->control = std::make_unique<transport::shm::FifoControl>();
      f->control->head.store(0);
      f->control->tail.store(0);
      f->headers.resize(slots);
      f->data.resize(slots * slotBytes);
      fifos_.push_back(std::move(f));
    }
  }
  transport::DeviceFifo fifo(int from, int to, int channel) {
    Storage& s = *fifos_[(from * n_ + to) * kChannels + channel];
    transport::DeviceFifo f;
    f.control = s.control.get();
    f.headers = s.headers.data();
    f.data = s.data.data();
    f.slots = slots_;
    f.slotBytes = slotBytes_;
    f.directAcks = &acks_[(static_cast<size_t>(from) * n_ + to) * kEntries];
    f.directImports = &imports_[(static_cast<size_t>(from) * n_ + to) * kEntries];
    return f;
  }
  // Rank `r` exports [base, base + bytes) as entry `e`; `mapped`: its peers map and ack it.
  void exportRange(int r, uint32_t e, const void* base, size_t bytes, bool mapped) {
    const uint64_t gen = 100 + e;
    exports_[r].push_back(Export{e, gen, static_cast<const char*>(base), bytes});
    for (int to = 0; to < n_ && mapped; ++to) {
      acks_[(static_cast<size_t>(r) * n_ + to) * kEntries + e] = gen;
      imports_[(static_cast<size_t>(r) * n_ + to) * kEntries + e] =
          transport::DeviceImport{const_cast<char*>(static_cast<const char*>(base)), bytes};
    }
  }
  transport::DeviceExportRef find(int r, const void* p, size_t bytes) const {
    const char* c = static_cast<const char*>(p);
    for (const Export& x : exports_[r])
      if (c >= x.base && c + bytes <= x.base + x.bytes) return {static_cast<int32_t>(x.entry), x.gen, x.base};
    return {};
  }

 private:
  struct Export {
    uint32_t entry;
    uint64_t gen;
    const char* base;
    size_t bytes;
  };
  struct Storage {
    std::unique_ptr<transport::shm::FifoControl> control;
    std::vector<transport::shm::SlotHeader> headers;
    std::vector<char> data;
  };
  int n_;
  uint32_t slots_;
  size_t slotBytes_;
  std::vector<std::unique_ptr<Storage>> fifos_;
  std::vector<std::vector<Export>> exports_;
  std::vector<uint64_t> acks_;
  std::vector<transport::DeviceImport> imports_;
};

// The one TransportManager call the lowering makes.
class FifoManager final : public transport::TransportManager {
 public:
  FifoManager(FifoWorld* w, int rank) : world_(w), rank_(rank) {}
  Result<transport::SendConnection*> sendConnection(int, int) override { return internalError("unused"); }
  Result<transport::RecvConnection*> recvConnection(int, int) override { return internalError("unused"); }
  Status prepare(const std::vector<int>&, int) override { return Status::ok(); }
  transport::Kind kindFor(int) const override { return transport::Kind::kShm; }
  uint64_t activityToken() const override { return 0; }
  void waitForActivity(uint64_t, int64_t) override {}
  transport::PeerStats stats(int) const override { return {}; }
  Result<transport::DeviceFifo> deviceFifo(int peer, int channel, bool send) override {
    return send ? world_->fifo(rank_, peer, channel) : world_->fifo(peer, rank_, channel);
  }
  transport::DeviceExportRef deviceExport(const void* p, size_t bytes) const override {
    return world_->find(rank_, p, bytes);
  }

 private:
  FifoWorld* world_;
  int rank_;
};

// A team of host threads sharing one barrier: a thread block.
struct ThreadTeam {
  uint32_t id;
  uint32_t size;
  std::barrier<>* bar;
  std::vector<char>* board;  // where the leader leaves what it shares

  bool leader() const { return id == 0; }
  dev::Span span() const { return dev::Span{id, size}; }
  void sync() { bar->arrive_and_wait(); }
  template <class T>
  T share(const T& v) {
    if (leader()) memcpy(board->data(), &v, sizeof(T));
    bar->arrive_and_wait();
    T out;
    memcpy(&out, board->data(), sizeof(T));
    bar->arrive_and_wait();
    return out;
  }
};

}  // namespace theseus::exec
