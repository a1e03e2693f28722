// An append-only log of small records for the hot path (the trace's events).
//
// A std::vector that grows copies everything it holds at each doubling and
// touches every new page on first write: in a trace of 8-byte allreduces that
// was most of tracing's cost per operation (page faults, clearing pages, the
// copies, unmapping the old array). Here records go into chunks of 4,096 that
// never move; each chunk is mapped with its pages already populated (one
// system call per chunk instead of a fault per page), and the first chunk
// exists before the first record.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <memory>
#include <type_traits>
#include <vector>

namespace theseus::telemetry {

template <typename T>
class ChunkedLog {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);

 public:
  static constexpr size_t kChunk = 4096;  // records per chunk (a power of two)

  // Room for `expected` records' chunk pointers; the first chunk is mapped now.
  explicit ChunkedLog(size_t expected = kChunk) {
    chunks_.reserve(expected / kChunk + 1);
    (void)grow();
  }
  ChunkedLog(const ChunkedLog&) = delete;
  ChunkedLog& operator=(const ChunkedLog&) = delete;

  // False when no memory could be mapped for a new chunk (the record is not kept).
  bool push(const T& record) {
    if (size_ == chunks_.size() * kChunk && !grow()) return false;
    chunks_[size_ / kChunk].get()[size_ % kChunk] = record;
    ++size_;
    return true;
  }
  size_t size() const { return size_; }
  template <typename F>
  void forEach(F&& f) const {
    for (size_t i = 0; i < size_; ++i) f(chunks_[i / kChunk].get()[i % kChunk]);
  }

 private:
  static constexpr size_t kBytes = kChunk * sizeof(T);
  struct Unmap {
    void operator()(T* p) const { munmap(p, kBytes); }
  };
  bool grow() {
    void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) return false;
    chunks_.emplace_back(static_cast<T*>(p));
    return true;
  }
  std::vector<std::unique_ptr<T, Unmap>> chunks_;
  size_t size_ = 0;
};

}  // namespace theseus::telemetry
