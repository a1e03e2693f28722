// parseConfig: the caller's struct is read size- and version-aware and never
// past its end (a guard page follows it), environment overrides win, values
// are validated with NCCL's result class, strings are copied.
#include <sys/mman.h>
#include <unistd.h>

#include <climits>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#include "comm/config.h"

namespace theseus::comm {
namespace {

class ScopedEnv {
 public:
  ScopedEnv(const char* n, const char* v) : name_(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

// Places the first `size` bytes of `c` (with c.size = size) so that they end
// exactly at a read-only page followed by an inaccessible one: reading past
// the caller's struct or writing to it crashes the test.
class GuardedConfig {
 public:
  GuardedConfig(const ncclConfig_t& c, size_t size, const std::vector<char>& extra = {}) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    mem_ = static_cast<char*>(mmap(nullptr, 2 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    char* start = mem_ + page_ - size;
    std::vector<char> bytes(size, '\x5a');
    ncclConfig_t copy = c;
    copy.size = size;
    memcpy(bytes.data(), &copy, std::min(size, sizeof(copy)));
    if (!extra.empty()) memcpy(bytes.data() + sizeof(copy), extra.data(), std::min(extra.size(), size - sizeof(copy)));
    memcpy(start, bytes.data(), size);
    mprotect(mem_, page_, PROT_READ);
    mprotect(mem_ + page_, page_, PROT_NONE);
    cfg_ = reinterpret_cast<const ncclConfig_t*>(start);
  }
  ~GuardedConfig() { munmap(mem_, 2 * page_); }
  const ncclConfig_t* get() const { return cfg_; }

 private:
  size_t page_;
  char* mem_;
  const ncclConfig_t* cfg_;
};

ncclConfig_t everythingSet(unsigned version) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.version = version;
  c.blocking = 0;
  c.cgaClusterSize = 2;
  c.minCTAs = 2;
  c.maxCTAs = 16;
  c.netName = "Socket";
  c.splitShare = 1;
  c.trafficClass = 5;
  c.commName = "trainer";
  c.collnetEnable = 1;
  c.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY;
  c.shrinkShare = 1;
  c.nvlsCTAs = 8;
  c.nChannelsPerNetPeer = 4;
  c.nvlinkCentricSched = 1;
  return c;
}

Result<CommConfig> parse(const ncclConfig_t* c, const CommConfig* inherit = nullptr) {
  CommConfig out;
  Status s = parseConfig(c, inherit, &out);
  if (!s.isOk()) return s;
  return out;
}

TEST(Config, NullGivesNcclDefaults) {
  auto r = parse(nullptr);
  ASSERT_TRUE(r.isOk());
  const CommConfig& c = r.value();
  EXPECT_TRUE(c.blocking);
  EXPECT_EQ(c.cgaClusterSize, 4);
  EXPECT_EQ(c.minCTAs, 1);
  EXPECT_EQ(c.maxCTAs, 64);
  EXPECT_TRUE(c.netName.empty());
  EXPECT_FALSE(c.splitShare);
  EXPECT_EQ(c.trafficClass, NCCL_CONFIG_UNDEF_INT);
  EXPECT_EQ(c.ctaPolicy, NCCL_CTA_POLICY_DEFAULT);
  EXPECT_EQ(c.nvlsCTAs, NCCL_CONFIG_UNDEF_INT);
  EXPECT_FALSE(c.nvlinkCentricSched);
}

TEST(Config, Size80ReadsEveryField) {
  GuardedConfig g(everythingSet(NCCL_VERSION(2, 28, 9)), 80);
  auto r = parse(g.get());
  ASSERT_TRUE(r.isOk()) << r.status().message();
  const CommConfig& c = r.value();
  EXPECT_FALSE(c.blocking);
  EXPECT_EQ(c.cgaClusterSize, 2);
  EXPECT_EQ(c.minCTAs, 2);
  EXPECT_EQ(c.maxCTAs, 16);
  EXPECT_EQ(c.netName, "Socket");
  EXPECT_TRUE(c.splitShare);
  EXPECT_EQ(c.trafficClass, 5);
  EXPECT_EQ(c.commName, "trainer");
  EXPECT_TRUE(c.collnetEnable);
  EXPECT_EQ(c.ctaPolicy, NCCL_CTA_POLICY_EFFICIENCY);
  EXPECT_TRUE(c.shrinkShare);
  EXPECT_EQ(c.nvlsCTAs, 8);
  EXPECT_EQ(c.nChannelsPerNetPeer, 4);
  EXPECT_TRUE(c.nvlinkCentricSched);
}

TEST(Config, Size72From227HeaderStopsAtNvlsCtas) {
  GuardedConfig g(everythingSet(NCCL_VERSION(2, 27, 3)), 72);
  auto r = parse(g.get());
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r.value().commName, "trainer");
  EXPECT_EQ(r.value().nvlsCTAs, 8);
  EXPECT_EQ(r.value().nChannelsPerNetPeer, NCCL_CONFIG_UNDEF_INT) << "beyond the caller's struct: default";
  EXPECT_FALSE(r.value().nvlinkCentricSched);
}

TEST(Config, Size48From226HeaderStopsAtTrafficClass) {
  GuardedConfig g(everythingSet(NCCL_VERSION(2, 26, 2)), 48);
  auto r = parse(g.get());
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_FALSE(r.value().blocking);
  EXPECT_EQ(r.value().maxCTAs, 16);
  EXPECT_TRUE(r.value().splitShare);
  EXPECT_EQ(r.value().trafficClass, 5);
  EXPECT_TRUE(r.value().commName.empty());
  EXPECT_FALSE(r.value().collnetEnable);
  EXPECT_EQ(r.value().ctaPolicy, 0);
  // A 2.18 header has the same size but predates trafficClass (2.25): ignored.
  GuardedConfig old(everythingSet(NCCL_VERSION(2, 18, 5)), 48);
  auto r2 = parse(old.get());
  ASSERT_TRUE(r2.isOk());
  EXPECT_EQ(r2.value().trafficClass, NCCL_CONFIG_UNDEF_INT);
  EXPECT_TRUE(r2.value().splitShare);
}

TEST(Config, LargerStructFromANewerHeader) {
  std::vector<char> future(48, '\x7f');  // fields we do not know: never interpreted
  GuardedConfig g(everythingSet(NCCL_VERSION(2, 30, 7)), 128, future);
  auto r = parse(g.get());
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r.value().nChannelsPerNetPeer, 4);
  EXPECT_EQ(r.value().commName, "trainer");
}

TEST(Config, FieldsNewerThanTheCallersVersionAreIgnored) {
  ncclConfig_t c = everythingSet(NCCL_VERSION(2, 27, 0));
  c.nChannelsPerNetPeer = 1000;  // invalid, but a 2.27 caller cannot have meant it
  GuardedConfig g(c, 80);
  auto r = parse(g.get());
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r.value().nChannelsPerNetPeer, NCCL_CONFIG_UNDEF_INT);
  EXPECT_FALSE(r.value().nvlinkCentricSched);
  GuardedConfig ancient(everythingSet(NCCL_VERSION(2, 13, 0)), 80);
  auto r2 = parse(ancient.get());
  ASSERT_TRUE(r2.isOk());
  EXPECT_TRUE(r2.value().blocking) << "blocking arrived in 2.14";
  EXPECT_EQ(r2.value().maxCTAs, 64);
}

TEST(Config, BadMagicAndTinySizesAreInvalidArguments) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.magic = 0x12345678;
  GuardedConfig g(c, 80);
  CommConfig out;
  Status s = parseConfig(g.get(), nullptr, &out);
  EXPECT_EQ(s.code(), ncclInvalidArgument);
  EXPECT_NE(s.message().find("not initialized via NCCL_CONFIG_INITIALIZER"), std::string::npos) << s.message();
  ncclConfig_t tiny = NCCL_CONFIG_INITIALIZER;
  GuardedConfig t(tiny, 8);
  Status s2 = parseConfig(t.get(), nullptr, &out);
  EXPECT_EQ(s2.code(), ncclInvalidArgument);
  EXPECT_NE(s2.message().find("too small"), std::string::npos);
}

TEST(Config, InvalidValuesNameTheField) {
  struct Case {
    void (*set)(ncclConfig_t&);
    const char* field;
  };
  const Case cases[] = {
      {[](ncclConfig_t& c) { c.blocking = 2; }, "config.blocking"},
      {[](ncclConfig_t& c) { c.cgaClusterSize = -1; }, "config.cgaClusterSize"},
      {[](ncclConfig_t& c) { c.minCTAs = 0; }, "config.minCTAs"},
      {[](ncclConfig_t& c) { c.maxCTAs = -3; }, "config.maxCTAs"},
      {[](ncclConfig_t& c) { c.minCTAs = 9, c.maxCTAs = 4; }, "config.minCTAs=9 is larger than config.maxCTAs=4"},
      {[](ncclConfig_t& c) { c.splitShare = 7; }, "config.splitShare"},
      {[](ncclConfig_t& c) { c.collnetEnable = -1; }, "config.collnetEnable"},
      {[](ncclConfig_t& c) { c.CTAPolicy = 3; }, "config.CTAPolicy"},
      {[](ncclConfig_t& c) { c.shrinkShare = 2; }, "config.shrinkShare"},
      {[](ncclConfig_t& c) { c.nvlsCTAs = 0; }, "config.nvlsCTAs"},
      {[](ncclConfig_t& c) { c.nChannelsPerNetPeer = 65; }, "config.nChannelsPerNetPeer"},
      {[](ncclConfig_t& c) { c.nvlinkCentricSched = 5; }, "config.nvlinkCentricSched"},
  };
  for (const auto& k : cases) {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    k.set(c);
    CommConfig out;
    Status s = parseConfig(&c, nullptr, &out);
    EXPECT_EQ(s.code(), ncclInvalidArgument) << k.field;
    EXPECT_NE(s.message().find(k.field), std::string::npos) << s.message();
  }
  ncclConfig_t big = NCCL_CONFIG_INITIALIZER;
  big.cgaClusterSize = 12;
  auto r = parse(&big);
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r.value().cgaClusterSize, 8) << "clamped like NCCL";
}

TEST(Config, EnvironmentWinsAndIsValidated) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 1;
  c.maxCTAs = 32;
  c.netName = "IB";
  {
    ScopedEnv b("NCCL_COMM_BLOCKING", "0");
    ScopedEnv m("NCCL_MAX_CTAS", "8");
    ScopedEnv n("NCCL_NET", "Socket");
    auto r = parse(&c);
    ASSERT_TRUE(r.isOk()) << r.status().message();
    EXPECT_FALSE(r.value().blocking);
    EXPECT_EQ(r.value().maxCTAs, 8);
    EXPECT_EQ(r.value().netName, "Socket");
  }
  {
    ScopedEnv b("NCCL_COMM_BLOCKING", "2");
    CommConfig out;
    Status s = parseConfig(&c, nullptr, &out);
    EXPECT_EQ(s.code(), ncclInvalidArgument);
    EXPECT_NE(s.message().find("NCCL_COMM_BLOCKING=2"), std::string::npos) << s.message();
  }
  {
    ScopedEnv b("NCCL_MIN_CTAS", "lots");
    CommConfig out;
    Status s = parseConfig(nullptr, nullptr, &out);
    EXPECT_EQ(s.code(), ncclInvalidArgument);
    EXPECT_NE(s.message().find("NCCL_MIN_CTAS='lots' is not a valid integer"), std::string::npos) << s.message();
  }
  {
    ScopedEnv p("NCCL_CTA_POLICY", "2");
    auto r = parse(nullptr);
    ASSERT_TRUE(r.isOk());
    EXPECT_EQ(r.value().ctaPolicy, 2);
  }
}

TEST(Config, InheritsWithoutAConfigButNotWithOne) {
  CommConfig parent;
  parent.blocking = false;
  parent.maxCTAs = 7;
  parent.netName = "Socket";
  auto inherited = parse(nullptr, &parent);
  ASSERT_TRUE(inherited.isOk());
  EXPECT_FALSE(inherited.value().blocking);
  EXPECT_EQ(inherited.value().maxCTAs, 7);
  EXPECT_EQ(inherited.value().netName, "Socket");
  {
    ScopedEnv b("NCCL_COMM_BLOCKING", "1");
    EXPECT_TRUE(parse(nullptr, &parent).value().blocking) << "env re-applied on inherit";
  }
  ncclConfig_t fresh = NCCL_CONFIG_INITIALIZER;
  auto own = parse(&fresh, &parent);
  ASSERT_TRUE(own.isOk());
  EXPECT_TRUE(own.value().blocking) << "an explicit config starts from the defaults";
  EXPECT_EQ(own.value().maxCTAs, 64);
}

TEST(Config, StringsAreCopied) {
  char name[] = "mycomm";
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.commName = name;
  auto r = parse(&c);
  ASSERT_TRUE(r.isOk());
  name[0] = 'X';
  EXPECT_EQ(r.value().commName, "mycomm");
}

// NCCL 2.29/2.30 fields: read from 88- and 96-byte structs, gated by version
// (graphStreamOrdering only from 2.30.5: in 2.30.3/2.30.4 its bytes are padding).
ncclConfig_t newFieldsSet(unsigned version) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.version = version;
  c.graphUsageMode = 1;
  c.numRmaCtx = 0;
  c.maxP2pPeers = 2;
  c.graphStreamOrdering = 0;
  return c;
}

TEST(Config, Size96From2307ReadsTheNewFields) {
  GuardedConfig g(newFieldsSet(NCCL_VERSION(2, 30, 7)), 96);
  auto r = parse(g.get());
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r.value().graphUsageMode, 1);
  EXPECT_EQ(r.value().numRmaCtx, 0);
  EXPECT_EQ(r.value().maxP2pPeers, 2);
  EXPECT_EQ(r.value().graphStreamOrdering, 0);
  EXPECT_EQ(r.value().callerVersion, 23007u);
}

TEST(Config, VersionGatesOfTheNewFields) {
  {
    GuardedConfig g(newFieldsSet(NCCL_VERSION(2, 30, 4)), 96);  // bytes 92-95 are padding in 2.30.4
    auto r = parse(g.get());
    ASSERT_TRUE(r.isOk()) << r.status().message();
    EXPECT_EQ(r.value().maxP2pPeers, 2);
    EXPECT_EQ(r.value().graphStreamOrdering, NCCL_CONFIG_UNDEF_INT);
  }
  {
    GuardedConfig g(newFieldsSet(NCCL_VERSION(2, 29, 7)), 88);
    auto r = parse(g.get());
    ASSERT_TRUE(r.isOk()) << r.status().message();
    EXPECT_EQ(r.value().graphUsageMode, 1);
    EXPECT_EQ(r.value().numRmaCtx, 0);
    EXPECT_EQ(r.value().maxP2pPeers, NCCL_CONFIG_UNDEF_INT) << "beyond the 88-byte struct";
  }
  {
    // A 2.28 caller cannot have meant what lies in those fields: defaults.
    GuardedConfig g(newFieldsSet(NCCL_VERSION(2, 28, 9)), 96);
    auto r = parse(g.get());
    ASSERT_TRUE(r.isOk()) << r.status().message();
    EXPECT_EQ(r.value().graphUsageMode, 2);
    EXPECT_EQ(r.value().numRmaCtx, 1);
  }
}

TEST(Config, NewFieldsAreValidatedAndOverriddenByTheEnvironment) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  {
    ScopedEnv m("NCCL_GRAPH_MIXING_SUPPORT", "0");
    ScopedEnv n("NCCL_NUM_RMA_CTX", "3");
    ScopedEnv p("NCCL_P2P_MAX_PEERS", "4");
    ScopedEnv o("NCCL_GRAPH_STREAM_ORDERING", "1");
    auto r = parse(&c);
    ASSERT_TRUE(r.isOk()) << r.status().message();
    EXPECT_EQ(r.value().graphUsageMode, 0);
    EXPECT_EQ(r.value().numRmaCtx, 3);
    EXPECT_EQ(r.value().maxP2pPeers, 4);
    EXPECT_EQ(r.value().graphStreamOrdering, 1);
  }
  {
    ScopedEnv m("NCCL_GRAPH_MIXING_SUPPORT", "1");  // NCCL maps 1 to mode 2
    auto r = parse(&c);
    ASSERT_TRUE(r.isOk()) << r.status().message();
    EXPECT_EQ(r.value().graphUsageMode, 2);
  }
  for (auto [field, value] : {std::pair{"graphUsageMode", 3}, {"numRmaCtx", -1}, {"maxP2pPeers", 0},
                              {"graphStreamOrdering", 2}}) {
    ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
    if (std::string(field) == "graphUsageMode") bad.graphUsageMode = value;
    if (std::string(field) == "numRmaCtx") bad.numRmaCtx = value;
    if (std::string(field) == "maxP2pPeers") bad.maxP2pPeers = value;
    if (std::string(field) == "graphStreamOrdering") bad.graphStreamOrdering = value;
    CommConfig out;
    Status s = parseConfig(&bad, nullptr, &out);
    EXPECT_EQ(s.code(), ncclInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  }
}

// ncclTimeout reaches only callers whose header has it (2.30 and later).
TEST(Config, TimeoutIsVisibleOnlyToCallersThatKnowIt) {
  CommConfig old, current;
  current.callerVersion = NCCL_VERSION(2, 30, 7);
  old.callerVersion = NCCL_VERSION(2, 28, 9);
  Status t = timeoutError("waited too long");
  EXPECT_EQ(visibleTo(t, current).code(), ncclTimeout);
  EXPECT_EQ(visibleTo(t, old).code(), ncclRemoteError);
  EXPECT_EQ(visibleTo(t, old).message(), "waited too long");
  EXPECT_EQ(visibleTo(t, CommConfig{}).code(), ncclRemoteError) << "no config: the header is unknown";
  EXPECT_EQ(visibleTo(invalidUsage("x"), old).code(), ncclInvalidUsage);
}

}  // namespace
}  // namespace theseus::comm
