// The flight recorder's ring (telemetry/flight_recorder.h): it keeps a power of two of entries so
// an operation costs a mask, not a division, but a dump reports exactly the configured number of
// the newest operations, in order, whatever the configured number is.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "telemetry/flight_recorder.h"
#include "test_timing.h"

namespace theseus::telemetry {

TEST(FlightRecorder, ADumpHoldsTheConfiguredNumberOfNewestOperations) {
  for (size_t capacity : {1u, 3u, 4u, 5u, 256u}) {
    FlightRecorder fr({1, 2, 0x77}, capacity);
    const uint64_t total = 2 * capacity + 3;
    for (uint64_t i = 0; i < total; ++i) {
      const uint64_t id = fr.queued(100 + i, "allreduce", "ring", 8, "float", 32, -1);
      EXPECT_EQ(id, i + 1);
      fr.started(id, 1000 * (i + 1));
      if (i + 1 < total) fr.done(id, 1000 * (i + 1) + 500);
    }
    const auto j = nlohmann::json::parse(fr.json("test"));
    const auto& entries = j["entries"];
    ASSERT_EQ(entries.size(), capacity) << capacity;
    for (size_t k = 0; k < capacity; ++k) {
      const uint64_t id = total - capacity + 1 + k;
      EXPECT_EQ(entries[k]["id"], id) << capacity;
      EXPECT_EQ(entries[k]["seq"], 99 + id) << capacity;
      EXPECT_EQ(entries[k]["start_ns"], 1000 * id) << capacity;
      EXPECT_EQ(entries[k]["state"], id == total ? "running" : "done") << capacity;
    }
  }
}

// An entry says what its buffers were and, from that and the communicator's mode, what ran it:
// which FIFOs it waited on (the doctor compares them across ranks).
TEST(FlightRecorder, AnEntrySaysItsMemoryAndItsExecutor) {
  using device::MemoryKind;
  using device::maskOf;
  struct Case {
    exec::DeviceExecutorMode mode;
    uint8_t memory;
    const char* kinds;     // "memory" ("" when left out)
    const char* executor;  // "executor"
  };
  const Case cases[] = {
      {exec::DeviceExecutorMode::kCuda, maskOf(MemoryKind::kHost), "host", "host"},
      {exec::DeviceExecutorMode::kOff, static_cast<uint8_t>(maskOf(MemoryKind::kHost) | maskOf(MemoryKind::kHostPinned)),
       "host+pinned host", "host"},
      {exec::DeviceExecutorMode::kEmulate, maskOf(MemoryKind::kHostPinned), "pinned host", "device (emulated)"},
      {exec::DeviceExecutorMode::kCuda, 0, "", ""},
  };
  for (const Case& c : cases) {
    FlightRecorder fr({0, 2, 1});
    fr.attach({{0, 0}, nullptr, nullptr, c.mode});
    fr.queued(7, "allreduce", "ring", 2, "float", 8, -1, c.memory);
    const auto e = nlohmann::json::parse(fr.json("test"))["entries"].at(0);
    if (*c.kinds == 0) {
      EXPECT_FALSE(e.contains("memory")) << e.dump();
      EXPECT_FALSE(e.contains("executor")) << e.dump();
      continue;
    }
    EXPECT_EQ(e.value("memory", ""), c.kinds) << e.dump();
    EXPECT_EQ(e.value("executor", ""), c.executor) << e.dump();
  }
}

// What the always-on recorder costs an operation, measured alone (printed; the machine's noise
// drowns it in a collective's time): its three calls with the default capacity.
TEST(FlightRecorder, CostPerOperation) {
  FlightRecorder fr({0, 2, 1});
  constexpr int kOps = 2000000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kOps; ++i) {
    const uint64_t id = fr.queued(static_cast<uint64_t>(i), "allreduce", "ring", 2, "float", 8, -1);
    fr.started(id, static_cast<uint64_t>(i));
    fr.done(id, static_cast<uint64_t>(i) + 1);
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / kOps;
  printf("flight recorder: %.1f ns per operation, %.2f%% of a 1.2 us 8-byte allreduce (2 ranks, shared memory)\n",
         ns, ns / 12.0);
  EXPECT_LT(ns, 120 * test::kTimeScale) << "a tenth of the fastest collective";
}

}  // namespace theseus::telemetry
