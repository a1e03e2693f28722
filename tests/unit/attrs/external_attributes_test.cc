// THESEUS_ATTRS_FILE: parsing, applying, change detection (same-size rewrites,
// atomic replacement), malformed files that keep the previous values, and
// files that disappear or never existed.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "attrs/external_attributes.h"
#include "common/log.h"

namespace theseus::attrs {
namespace {

class AttrsFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/theseus_attrs_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/attrs.json";
  }
  void TearDown() override { (void)system(("rm -rf " + dir_).c_str()); }
  // Written like a health agent should: a temporary file renamed over the old one.
  void write(const std::string& text) {
    std::string tmp = path_ + ".tmp";
    std::ofstream(tmp) << text;
    ASSERT_EQ(rename(tmp.c_str(), path_.c_str()), 0);
  }
  std::string dir_, path_;
};

TEST_F(AttrsFile, AppliesAndReplacesFileValues) {
  ExternalAttributes ext(path_);
  AttributeStore s(0);
  ASSERT_TRUE(s.set("link.0.1.gbps", 5, Source::kProbe).isOk());
  write(R"json({"version":1,"attributes":{"node.h1.nic.mlx5_0.healthy":0,"link.0.3.penalty":4,"node.h2.healthy":true}})json");
  auto r = ext.poll(s);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_TRUE(r.value());
  EXPECT_EQ(s.get("node.h1.nic.mlx5_0.healthy")->value, 0);
  EXPECT_EQ(s.get("node.h1.nic.mlx5_0.healthy")->source, Source::kFile);
  EXPECT_EQ(s.get("link.0.3.penalty")->value, 4);
  EXPECT_EQ(s.get("node.h2.healthy")->value, 1);
  // Unchanged file: nothing to do.
  r = ext.poll(s);
  ASSERT_TRUE(r.isOk());
  EXPECT_FALSE(r.value());
  // The agent drops one value and changes another; probes are untouched.
  write(R"json({"version":1,"attributes":{"node.h1.nic.mlx5_0.healthy":1}})json");
  r = ext.poll(s);
  ASSERT_TRUE(r.isOk() && r.value());
  EXPECT_EQ(s.get("node.h1.nic.mlx5_0.healthy")->value, 1);
  EXPECT_FALSE(s.get("link.0.3.penalty").has_value());
  EXPECT_FALSE(s.get("node.h2.healthy").has_value());
  EXPECT_EQ(s.get("link.0.1.gbps")->value, 5);
}

TEST_F(AttrsFile, SameSizeRewriteInPlaceIsNoticed) {
  ExternalAttributes ext(path_);
  AttributeStore s(0);
  std::ofstream(path_) << R"json({"version":1,"attributes":{"node.h.healthy":1}})json";
  ASSERT_TRUE(ext.poll(s).value());
  // Same size, same inode, written right away: nanosecond times tell it apart.
  usleep(2000);
  { std::ofstream(path_, std::ios::trunc) << R"json({"version":1,"attributes":{"node.h.healthy":0}})json"; }
  auto r = ext.poll(s);
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(r.value());
  EXPECT_EQ(s.get("node.h.healthy")->value, 0);
}

TEST_F(AttrsFile, MalformedFileKeepsPreviousValuesAndSaysWhy) {
  ExternalAttributes ext(path_);
  AttributeStore s(0);
  write(R"json({"version":1,"attributes":{"node.h.healthy":1,"link.0.1.penalty":3}})json");
  ASSERT_TRUE(ext.poll(s).value());
  struct Case {
    const char* text;
    const char* why;
  };
  const Case cases[] = {
      {R"json({"version":1,"attributes":{"node.h.healthy":0)json", "not valid JSON"},
      {R"json([1])json", "top level must be an object"},
      {R"json({"attributes":{}})json", "'version' is missing"},
      {R"json({"version":2,"attributes":{}})json", "'version' must be 1"},
      {R"json({"version":1})json", "'attributes' is missing"},
      {R"json({"version":1,"attributes":[1]})json", "must be an object"},
      {R"json({"version":1,"attributes":{"node.h.healthy":"no"}})json", "attributes.node.h.healthy: expected a number"},
      {R"json({"version":1,"attributes":{"node..healthy":0}})json", "empty component"},
      {R"json({"version":1,"attributes":{"x":null}})json", "got null"},
      {R"json({"version":1,"attributs":{}})json", "unknown field 'attributs'"},
  };
  for (const Case& c : cases) {
    write(c.text);
    auto r = ext.poll(s);
    ASSERT_FALSE(r.isOk()) << c.text;
    EXPECT_NE(r.status().message().find(path_), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.why), std::string::npos) << c.text << " -> " << r.status().message();
    EXPECT_NE(std::string(log::lastError()).find(c.why), std::string::npos) << "the WARN names the problem";
    EXPECT_EQ(s.get("node.h.healthy")->value, 1);
    EXPECT_EQ(s.get("link.0.1.penalty")->value, 3);
    // The same bad version is reported once, not at every poll.
    auto again = ext.poll(s);
    EXPECT_TRUE(again.isOk() && !again.value());
  }
  // Garbage bytes are not echoed raw into the WARN line (issue 14, item 11).
  write(std::string("\x01\x02\xff\x1b[31m") + std::string(5000, 'z'));
  auto garbage = ext.poll(s);
  ASSERT_FALSE(garbage.isOk());
  const std::string g = garbage.status().message();
  for (unsigned char c : g) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "raw byte " << int(c) << " in: " << g;
  EXPECT_LT(g.size(), 1000u) << g;
  write(R"json({"version":1,"attributes":{"node.h.healthy":0},"comment":"fixed"})json");
  auto r = ext.poll(s);
  ASSERT_TRUE(r.isOk() && r.value());
  EXPECT_EQ(s.get("node.h.healthy")->value, 0);
  EXPECT_FALSE(s.get("link.0.1.penalty").has_value());
}

TEST_F(AttrsFile, MissingFilesAndDeletion) {
  ExternalAttributes ext(path_);
  AttributeStore s(0);
  auto r = ext.poll(s);  // not written yet: fine
  ASSERT_TRUE(r.isOk());
  EXPECT_FALSE(r.value());
  write(R"json({"version":1,"attributes":{"node.h.healthy":0}})json");
  ASSERT_TRUE(ext.poll(s).value());
  ASSERT_EQ(unlink(path_.c_str()), 0);
  r = ext.poll(s);
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(r.value());
  EXPECT_FALSE(s.get("node.h.healthy").has_value());
  ExternalAttributes off("");
  EXPECT_FALSE(off.poll(s).value());
}

}  // namespace
}  // namespace theseus::attrs
