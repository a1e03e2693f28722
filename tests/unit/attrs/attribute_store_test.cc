// AttributeStore: names, values, sources, ages, replacement by source,
// concurrent writers, and the snapshot wire format (round trip and garbage).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "attrs/attribute_store.h"
#include "common/deadline.h"

namespace theseus::attrs {
namespace {

TEST(AttributeNames, AcceptsDottedNamesAndExplainsBadOnes) {
  for (const char* ok : {"link.0.3.gbps", "node.host-1.nic.mlx5_0.healthy", "gpu.7.sm_clock_mhz", "a", "x:y.z"})
    EXPECT_TRUE(checkName(ok).isOk()) << ok;
  EXPECT_NE(checkName("").message().find("empty"), std::string::npos);
  EXPECT_NE(checkName("link..gbps").message().find("empty component at character 6"), std::string::npos);
  EXPECT_NE(checkName(".x").message().find("empty component"), std::string::npos);
  EXPECT_NE(checkName("x.").message().find("empty component"), std::string::npos);
  EXPECT_NE(checkName("link.0 .gbps").message().find("character 7 (' ')"), std::string::npos);
  EXPECT_NE(checkName("link.*.gbps").message().find("'*'"), std::string::npos);
  EXPECT_NE(checkName(std::string(201, 'a')).message().find("limit is 200"), std::string::npos);
}

TEST(AttributeNames, HostLabelsAreOneComponent) {
  EXPECT_EQ(hostLabel("node1.cluster.org"), "node1_cluster_org");
  EXPECT_EQ(hostLabel("gpu-node-07"), "gpu-node-07");
  EXPECT_EQ(hostLabel(""), "unknown");
  EXPECT_TRUE(checkName("node." + hostLabel("a.b c/d") + ".healthy").isOk());
}

TEST(AttributeStore, SetGetClearWithSourceRankAndTime) {
  AttributeStore s(3);
  uint64_t before = nowNs();
  ASSERT_TRUE(s.set("link.3.1.gbps", 12.5, Source::kProbe).isOk());
  auto a = s.get("link.3.1.gbps");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->value, 12.5);
  EXPECT_EQ(a->source, Source::kProbe);
  EXPECT_EQ(a->rank, 3);
  EXPECT_GE(a->timestampNs, before);
  EXPECT_LE(a->timestampNs, nowNs());
  // Another source overwrites the same name.
  ASSERT_TRUE(s.set("link.3.1.gbps", 1.0, Source::kApi, 42).isOk());
  EXPECT_EQ(s.get("link.3.1.gbps")->source, Source::kApi);
  EXPECT_EQ(s.get("link.3.1.gbps")->timestampNs, 42u);
  EXPECT_TRUE(s.clear("link.3.1.gbps"));
  EXPECT_FALSE(s.clear("link.3.1.gbps"));
  EXPECT_FALSE(s.get("link.3.1.gbps").has_value());
  EXPECT_EQ(s.size(), 0u);
}

TEST(AttributeStore, BadInputChangesNothing) {
  AttributeStore s(0);
  ASSERT_TRUE(s.set("a.b", 1, Source::kApi).isOk());
  uint64_t gen = s.generation();
  EXPECT_FALSE(s.set("a..b", 1, Source::kApi).isOk());
  Status nan = s.set("a.b", std::nan(""), Source::kApi);
  EXPECT_NE(nan.message().find("not finite"), std::string::npos);
  EXPECT_FALSE(s.set("a.b", INFINITY, Source::kApi).isOk());
  EXPECT_EQ(s.get("a.b")->value, 1);
  EXPECT_EQ(s.generation(), gen);
  // replaceSource checks every name before touching anything.
  ASSERT_TRUE(s.set("f.x", 5, Source::kFile).isOk());
  EXPECT_FALSE(s.replaceSource(Source::kFile, {{"f.y", 1}, {"bad..name", 2}}).isOk());
  EXPECT_EQ(s.get("f.x")->value, 5);
  EXPECT_FALSE(s.get("f.y").has_value());
}

TEST(AttributeStore, ReplaceSourceSwapsOnlyThatSource) {
  AttributeStore s(1);
  ASSERT_TRUE(s.set("node.h.healthy", 1, Source::kFile).isOk());
  ASSERT_TRUE(s.set("node.h.nic.m.healthy", 1, Source::kFile).isOk());
  ASSERT_TRUE(s.set("link.1.0.gbps", 9, Source::kProbe).isOk());
  ASSERT_TRUE(s.set("link.1.0.penalty", 2, Source::kApi).isOk());
  ASSERT_TRUE(s.replaceSource(Source::kFile, {{"node.h.healthy", 0}, {"node.g.healthy", 1}}).isOk());
  EXPECT_EQ(s.get("node.h.healthy")->value, 0);
  EXPECT_EQ(s.get("node.g.healthy")->source, Source::kFile);
  EXPECT_FALSE(s.get("node.h.nic.m.healthy").has_value());
  EXPECT_EQ(s.get("link.1.0.gbps")->value, 9);
  EXPECT_EQ(s.get("link.1.0.penalty")->value, 2);
}

TEST(AttributeStore, EveryWriteHasANewId) {
  AttributeStore s(0);
  ASSERT_TRUE(s.set("a.x", 1, Source::kApi).isOk());
  uint64_t first = s.get("a.x")->writeId;
  ASSERT_TRUE(s.set("b.x", 1, Source::kApi).isOk());
  EXPECT_EQ(s.get("a.x")->writeId, first);  // untouched
  ASSERT_TRUE(s.set("a.x", 1, Source::kApi).isOk());
  EXPECT_GT(s.get("a.x")->writeId, first);  // the same value written again is a new measurement
  ASSERT_TRUE(s.replaceSource(Source::kFile, {{"c.x", 2}}).isOk());
  EXPECT_GT(s.get("c.x")->writeId, s.get("a.x")->writeId);
  EXPECT_EQ(s.snapshot().entries[0].writeId, s.get("a.x")->writeId);
}

TEST(AttributeStore, SnapshotAgesGrowWithTime) {
  AttributeStore s(2);
  ASSERT_TRUE(s.set("old.value", 1, Source::kApi, nowNs() - 3000000000ull).isOk());
  ASSERT_TRUE(s.set("new.value", 2, Source::kApi).isOk());
  Snapshot snap = s.snapshot();
  ASSERT_EQ(snap.entries.size(), 2u);
  EXPECT_EQ(snap.rank, 2);
  EXPECT_EQ(snap.entries[0].name, "new.value");  // sorted by name
  EXPECT_LT(snap.entries[0].ageNs, 1000000000ull);
  EXPECT_GE(snap.entries[1].ageNs, 3000000000ull);
  EXPECT_LT(snap.entries[1].ageNs, 4000000000ull);
}

TEST(AttributeStore, ConcurrentWritersAndSnapshots) {
  AttributeStore s(0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  constexpr int kWriters = 4, kWrites = 5000;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < kWrites; ++i) {
        ASSERT_TRUE(s.set("link.0." + std::to_string(w + 1) + ".gbps", i, Source::kProbe).isOk());
        ASSERT_TRUE(s.set("shared.counter", w * kWrites + i, Source::kProbe).isOk());
        if (i % 100 == 0) s.clear("transient.x");
        else (void)s.set("transient.x", i, Source::kApi);
      }
    });
  }
  size_t snapshots = 0;
  std::thread reader([&] {
    do {  // at least once: under load the writers may finish before this thread first runs
      Snapshot snap = s.snapshot();
      for (size_t i = 1; i < snap.entries.size(); ++i) ASSERT_LT(snap.entries[i - 1].name, snap.entries[i].name);
      ++snapshots;
    } while (!stop.load());
  });
  for (auto& t : writers) t.join();
  stop = true;
  reader.join();
  EXPECT_GT(snapshots, 0u);
  for (int w = 0; w < kWriters; ++w) EXPECT_EQ(s.get("link.0." + std::to_string(w + 1) + ".gbps")->value, kWrites - 1);
  EXPECT_TRUE(s.get("shared.counter").has_value());
  EXPECT_GE(s.generation(), static_cast<uint64_t>(kWriters) * kWrites * 2);
}

TEST(Snapshot, RoundTripKeepsEverything) {
  Snapshot s;
  s.rank = 5;
  s.entries = {{"a.b", 1.5, Source::kApi, 2000, 5, 1},
               {"link.5.2.gbps", 11.25, Source::kProbe, 0, 5, 99},
               {"node.h.healthy", 0, Source::kFile, 123456000, 5, 7},
               {"x.merged", -3, Source::kMerged, 7000, 2, 8},
               {"y.unknown_rank", 1e300, Source::kApi, 1000, -1, 12345678901234ull}};
  auto back = Snapshot::deserialize(s.serialize());
  ASSERT_TRUE(back.isOk()) << back.status().message();
  ASSERT_EQ(back.value().entries.size(), s.entries.size());
  EXPECT_EQ(back.value().rank, 5);
  for (size_t i = 0; i < s.entries.size(); ++i) {
    const SnapshotEntry &a = s.entries[i], &b = back.value().entries[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.value, b.value);
    EXPECT_EQ(a.source, b.source);
    EXPECT_EQ(a.ageNs / 1000, b.ageNs / 1000);  // microsecond resolution on the wire
    EXPECT_EQ(a.rank, b.rank);
    EXPECT_EQ(a.writeId, b.writeId);
  }
}

TEST(Snapshot, GarbageIsRejectedWithAReason) {
  struct Case {
    const char* text;
    const char* why;
  };
  const Case cases[] = {
      {"", "not JSON"},
      {"[1,2]", "not a JSON object"},
      {R"json({"format":2,"rank":0,"a":[]})json", "\"format\" must be 1"},
      {R"json({"format":1,"rank":-1,"a":[]})json", "\"rank\""},
      {R"json({"format":1,"rank":0})json", "\"a\" must be an array"},
      {R"json({"format":1,"rank":0,"a":[["x",1,0]]})json", "entry 0 must be"},
      {R"json({"format":1,"rank":0,"a":[["x..y",1,0,0,1]]})json", "entry 0: attribute name"},
      {R"json({"format":1,"rank":0,"a":[["x","1",0,0]]})json", "entry 0 must be"},
      {R"json({"format":1,"rank":0,"a":[["x",1,9,0,1]]})json", "unknown source 9"},
      {R"json({"format":1,"rank":0,"a":[["x",1,0,-5,1]]})json", "entry 0 must be"},
      {R"json({"format":1,"rank":0,"a":[["x",1,0,5]]})json", "entry 0 must be"},
      {R"json({"format":1,"rank":0,"a":[["b",1,0,0,1],["a",1,0,0,2]]})json", "entry 1 ('a') is out of order"},
      {R"json({"format":1,"rank":0,"a":[["a",1,0,0,1],["a",1,0,0,2]]})json", "out of order or repeated"},
      {R"json({"format":1,"rank":0,"a":[["a",1,0,0,1,-7]]})json", "bad rank -7"},
  };
  for (const Case& c : cases) {
    auto r = Snapshot::deserialize(c.text);
    ASSERT_FALSE(r.isOk()) << c.text;
    EXPECT_NE(r.status().message().find(c.why), std::string::npos) << c.text << " -> " << r.status().message();
  }
}

}  // namespace
}  // namespace theseus::attrs
