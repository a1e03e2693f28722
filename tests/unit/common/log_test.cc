// The process's last error (ncclGetLastError's text): callers read the pointer
// it returns without a lock while other threads set newer errors.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

#include "common/log.h"

namespace theseus::log {
namespace {

TEST(LastError, ANewerErrorReplacesTheText) {
  setLastError("first");
  EXPECT_STREQ(lastError(), "first");
  setLastError("second");
  EXPECT_STREQ(lastError(), "second");
}

// A writer thread sets 2000 errors, each one letter repeated, one more each time the reader finished
// reading a text: so every read overlaps a write. Each text read must be one letter throughout (no mix of
// an older and a newer error), and the last one read after the writer ended is its last.
TEST(LastError, ATextACallerHoldsStaysWholeWhileAnotherThreadSetsNewerOnes) {
  constexpr int kErrors = 2000;
  constexpr size_t kLength = 1500;
  setLastError("");  // the reader skips empty texts (before the writer's first)
  std::atomic<int> reads{0};
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < kErrors; ++i) {
      const int seen = reads.load();
      setLastError(std::string(kLength, static_cast<char>('a' + i % 26)));
      while (reads.load() == seen && i + 1 < kErrors) std::this_thread::yield();
    }
    done = true;
  });
  int torn = 0;
  while (!done.load()) {
    const std::string text = lastError();
    if (!text.empty() && (text.size() != kLength || text.find_first_not_of(text[0]) != std::string::npos)) {
      if (torn++ == 0) ADD_FAILURE() << "a text of " << text.size() << " bytes: " << text.substr(0, 40) << "...";
    }
    reads.fetch_add(1);
  }
  writer.join();
  EXPECT_EQ(torn, 0);
  EXPECT_EQ(std::string(lastError()), std::string(kLength, static_cast<char>('a' + (kErrors - 1) % 26)));
}

}  // namespace
}  // namespace theseus::log
