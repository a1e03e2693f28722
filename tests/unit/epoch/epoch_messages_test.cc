// The epoch wire format: every message kind round-trips; garbage, truncation,
// trailing bytes, other format versions and inconsistent fields are rejected
// with a message (never a crash), including random bytes.
#include <gtest/gtest.h>

#include <random>

#include "epoch/epoch_messages.h"

namespace theseus::epoch {
namespace {

EpochMsg sample(MsgKind k) {
  EpochMsg m;
  m.kind = k;
  m.version = 7;
  m.horizon = 1000;
  m.reportAt = 900;
  m.effectiveSeq = 1000;
  m.seq = 123456789012345ull;
  m.ok = false;
  m.text = k == MsgKind::kPrepare ? std::string("{\"format\":1}\0x", 14) : "why not";
  m.reason = "policy 'adaptive': because";
  return m;
}

TEST(EpochMessages, EveryKindRoundTrips) {
  for (MsgKind k : {MsgKind::kGrant, MsgKind::kPrepare, MsgKind::kCommit, MsgKind::kCancel, MsgKind::kProgress,
                    MsgKind::kAck}) {
    EpochMsg m = sample(k);
    auto d = EpochMsg::decode(m.encode());
    ASSERT_TRUE(d.isOk()) << msgKindName(k) << ": " << d.status().message();
    const EpochMsg& r = d.value();
    EXPECT_EQ(r.kind, k);
    switch (k) {
      case MsgKind::kGrant:
        EXPECT_EQ(r.horizon, 1000u);
        EXPECT_EQ(r.reportAt, 900u);
        break;
      case MsgKind::kPrepare:
        EXPECT_EQ(r.version, 7u);
        EXPECT_EQ(r.horizon, 1000u);
        EXPECT_EQ(r.text, m.text);  // binary-safe
        EXPECT_EQ(r.reason, m.reason);
        break;
      case MsgKind::kCommit:
        EXPECT_EQ(r.version, 7u);
        EXPECT_EQ(r.effectiveSeq, 1000u);
        EXPECT_EQ(r.horizon, 1000u);
        EXPECT_EQ(r.reportAt, 900u);
        break;
      case MsgKind::kCancel:
        EXPECT_EQ(r.version, 7u);
        EXPECT_EQ(r.text, "why not");
        break;
      case MsgKind::kProgress: EXPECT_EQ(r.seq, 123456789012345ull); break;
      case MsgKind::kAck:
        EXPECT_EQ(r.version, 7u);
        EXPECT_FALSE(r.ok);
        EXPECT_EQ(r.text, "why not");
        break;
    }
    EXPECT_FALSE(r.describe().empty());
  }
}

void expectRejected(const std::string& bytes, const std::string& needle) {
  auto d = EpochMsg::decode(bytes);
  ASSERT_FALSE(d.isOk()) << "accepted: " << needle;
  EXPECT_EQ(d.status().code(), ncclInvalidArgument);
  EXPECT_NE(d.status().message().find(needle), std::string::npos) << d.status().message();
}

TEST(EpochMessages, GarbageIsRejectedWithAReason) {
  expectRejected("", "magic");
  expectRejected("XY\x01\x01", "magic");
  std::string grant = sample(MsgKind::kGrant).encode();
  std::string other = grant;
  other[2] = 9;
  expectRejected(other, "format version 9");
  std::string badType = grant;
  badType[3] = 42;
  expectRejected(badType, "unknown type 42");
  expectRejected(grant.substr(0, grant.size() - 1), "truncated");
  expectRejected(grant + "x", "trailing");
  std::string prepare = sample(MsgKind::kPrepare).encode();
  expectRejected(prepare.substr(0, 30), "truncated");
  // A string length that points past the end.
  std::string lying = prepare;
  lying[4 + 16] = '\xff';
  lying[4 + 17] = '\xff';
  expectRejected(lying, "truncated");
}

TEST(EpochMessages, InconsistentFieldsAreRejected) {
  EpochMsg g;
  g.kind = MsgKind::kGrant;
  g.horizon = 10;
  g.reportAt = 11;
  expectRejected(g.encode(), "beyond its horizon");
  EpochMsg c;
  c.kind = MsgKind::kCommit;
  c.version = 3;
  c.effectiveSeq = 100;
  c.horizon = 50;
  expectRejected(c.encode(), "inconsistent");
  EpochMsg a;
  a.kind = MsgKind::kAck;
  a.version = 0;
  expectRejected(a.encode(), "version 0");
  std::string ack = sample(MsgKind::kAck).encode();
  ack[4 + 8] = 2;  // the ok flag must be 0 or 1
  expectRejected(ack, "malformed");
}

TEST(EpochMessages, RandomBytesNeverCrash) {
  std::mt19937 rng(12345);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string b(rng() % 64, '\0');
    for (char& c : b) c = static_cast<char>(rng());
    if (i % 2 == 0 && b.size() >= 4) {  // half of them with a valid header, to reach the field parsers
      b[0] = 'E';
      b[1] = 'P';
      b[2] = EpochMsg::kFormat;
      b[3] = static_cast<char>(1 + rng() % 6);
    }
    auto d = EpochMsg::decode(b);
    if (d.isOk()) {
      ++accepted;
      EXPECT_EQ(EpochMsg::decode(d.value().encode()).isOk(), true);
    } else {
      EXPECT_FALSE(d.status().message().empty());
    }
  }
  EXPECT_LT(accepted, 20000);
}

}  // namespace
}  // namespace theseus::epoch
