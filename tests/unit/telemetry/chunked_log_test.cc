// The trace's append-only log (telemetry/chunked_log.h): records across many chunks come back
// in order, none lost, and the chunks never move (a record's address stays valid).
#include <gtest/gtest.h>

#include <cstdint>

#include "telemetry/chunked_log.h"

namespace theseus::telemetry {

struct Rec {
  uint64_t a, b;
};

TEST(ChunkedLog, RecordsComeBackInOrderAcrossChunks) {
  ChunkedLog<Rec> log(10);  // fewer expected than pushed: the chunk table grows too
  const size_t n = 3 * ChunkedLog<Rec>::kChunk + 17;
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(log.push(Rec{i, ~i}));
  EXPECT_EQ(log.size(), n);
  const Rec* first = nullptr;
  log.forEach([&](const Rec& r) {
    if (first == nullptr) first = &r;
  });
  size_t next = 0;
  log.forEach([&](const Rec& r) {
    EXPECT_EQ(r.a, next);
    EXPECT_EQ(r.b, ~next);
    ++next;
  });
  EXPECT_EQ(next, n);
  for (size_t i = 0; i < ChunkedLog<Rec>::kChunk; ++i) ASSERT_TRUE(log.push(Rec{0, 0}));
  const Rec* again = nullptr;
  log.forEach([&](const Rec& r) {
    if (again == nullptr) again = &r;
  });
  EXPECT_EQ(first, again) << "records never move";
}

TEST(ChunkedLog, EmptyLogVisitsNothing) {
  ChunkedLog<Rec> log;
  int visits = 0;
  log.forEach([&](const Rec&) { ++visits; });
  EXPECT_EQ(visits, 0);
  EXPECT_EQ(log.size(), 0u);
}

}  // namespace theseus::telemetry
