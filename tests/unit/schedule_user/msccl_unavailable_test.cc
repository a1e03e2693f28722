// Builds without tinyxml2: MSCCL XML files are refused with a message that
// says why and what to install, through every entry point.
#include <gtest/gtest.h>

#include <string>

#include "schedule/user/msccl_import.h"
#include "schedule/user/user_schedules.h"

namespace theseus::schedule::user {
namespace {

TEST(MscclUnavailable, SaysWhyAndWhatToInstall) {
  const std::string path = std::string(THESEUS_EXAMPLES_DIR) + "/allreduce_ring_4.xml";
  Result<ScheduleHandle> r = loadFile(path);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find(path + ": MSCCL XML import is not available"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("libtinyxml2-dev"), std::string::npos);
  EXPECT_FALSE(parseMscclXml("<algo/>", "x.xml").isOk());
}

}  // namespace
}  // namespace theseus::schedule::user
