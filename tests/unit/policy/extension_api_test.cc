// The attribute and policy part of include/theseus/theseus.h, through the real
// libnccl.so.2 with rank processes: set/get/clear/list on a live communicator,
// argument errors with ncclGetLastError() text, policy checks.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "mp_test.h"
#include "nccl.h"
#include "theseus/theseus.h"

namespace {

THESEUS_RANK_FN(attribute_api_body) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  const std::string mine = "link." + std::to_string(ctx.rank) + ".0.penalty";
  RANK_NCCL(theseusSetAttribute(comm, mine.c_str(), 2.5));
  RANK_NCCL(theseusSetAttribute(comm, "node.host-a.healthy", 0));
  double value = -1;
  int isSet = -1;
  RANK_NCCL(theseusGetAttribute(comm, mine.c_str(), &value, &isSet));
  RANK_CHECK(isSet == 1 && value == 2.5);
  RANK_NCCL(theseusGetAttribute(comm, "gpu.9.throttled", &value, &isSet));
  RANK_CHECK(isSet == 0 && value == 2.5);
  // The list is JSON with every attribute this rank set, its source and rank. Its
  // length may change between calls (ages, probes), so size the buffer until it fits.
  size_t needed = 0;
  RANK_NCCL(theseusListAttributes(comm, nullptr, 0, &needed));
  RANK_CHECK(needed > 1);
  std::string text;
  size_t again = needed;
  for (int tries = 0; tries < 10 && again > text.size(); ++tries) {
    text.assign(again + 64, '\0');
    RANK_NCCL(theseusListAttributes(comm, text.data(), text.size(), &again));
  }
  RANK_CHECK(again <= text.size());
  text.resize(again - 1);
  RANK_CHECK(text.find("\"" + mine + "\":{\"age_ms\":") != std::string::npos);
  RANK_CHECK(text.find("\"source\":\"api\"") != std::string::npos);
  RANK_CHECK(text.find("\"rank\":" + std::to_string(ctx.rank)) != std::string::npos);
  // Truncation: NUL-terminated, *needed unchanged.
  char small[8];
  RANK_NCCL(theseusListAttributes(comm, small, sizeof(small), &again));
  RANK_CHECK(again > sizeof(small) && strlen(small) == 7 && strncmp(small, text.c_str(), 7) == 0);
  RANK_NCCL(theseusClearAttribute(comm, mine.c_str()));
  RANK_NCCL(theseusClearAttribute(comm, mine.c_str()));  // not set: fine
  RANK_NCCL(theseusGetAttribute(comm, mine.c_str(), &value, &isSet));
  RANK_CHECK(isSet == 0);
  // Bad input: an error code and a readable last error; nothing changes.
  RANK_CHECK(theseusSetAttribute(comm, "link..gbps", 1) == ncclInvalidArgument);
  RANK_CHECK(strstr(ncclGetLastError(comm), "theseusSetAttribute: attribute name 'link..gbps' has an empty component"));
  RANK_CHECK(theseusSetAttribute(comm, "x.y", 1.0 / 0.0) == ncclInvalidArgument);
  RANK_CHECK(strstr(ncclGetLastError(comm), "not finite"));
  RANK_CHECK(theseusSetAttribute(comm, nullptr, 1) == ncclInvalidArgument);
  RANK_CHECK(theseusGetAttribute(comm, "x.y", nullptr, &isSet) == ncclInvalidArgument);
  RANK_CHECK(theseusListAttributes(comm, nullptr, 4, &again) == ncclInvalidArgument);
  RANK_CHECK(theseusSetAttribute(nullptr, "x.y", 1) != ncclSuccess);
  RANK_NCCL(theseusGetAttribute(comm, "x.y", &value, &isSet));
  RANK_CHECK(isSet == 0);
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(ExtensionApi, AttributesOnALiveCommunicator) {
  EXPECT_RANKS_OK(theseus::test::runRanks("attribute_api_body", 2));
}

TEST(ExtensionApi, CheckPolicy) {
  char msg[512];
  ASSERT_EQ(theseusCheckPolicy("static", msg, sizeof(msg)), ncclSuccess);
  EXPECT_NE(std::string(msg).find("JSON policy 'static'"), std::string::npos) << msg;
  ASSERT_EQ(theseusCheckPolicy(THESEUS_SOURCE_DIR "/policies/adaptive.json", msg, sizeof(msg)), ncclSuccess);
  EXPECT_NE(std::string(msg).find("JSON policy 'adaptive'"), std::string::npos) << msg;
  ASSERT_EQ(theseusCheckPolicy(THESEUS_COST_MODEL_PLUGIN, msg, sizeof(msg)), ncclSuccess);
  EXPECT_NE(std::string(msg).find("policy plugin 'cost_model'"), std::string::npos) << msg;
  const std::string bad = testing::TempDir() + "/bad_policy.json";
  std::ofstream(bad) << R"json({"version":1,"rules":[{"name":"oops","use":"rnig"}]})json";
  EXPECT_EQ(theseusCheckPolicy(bad.c_str(), msg, sizeof(msg)), ncclInvalidArgument);
  EXPECT_NE(std::string(msg).find(bad + ": rules[0] ('oops'): field 'use.schedule': unknown schedule 'rnig'"),
            std::string::npos)
      << msg;
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("unknown schedule 'rnig'"), std::string::npos);
  EXPECT_EQ(theseusCheckPolicy("nonsense", nullptr, 0), ncclInvalidUsage);
  EXPECT_EQ(theseusCheckPolicy(nullptr, msg, sizeof(msg)), ncclInvalidArgument);
}

}  // namespace
