// MSCCL XML import in builds without tinyxml2: every use says so clearly.
#include "schedule/user/msccl_import.h"

namespace theseus::schedule::user {

Result<std::shared_ptr<FixedSchedule>> parseMscclXml(const std::string&, const std::string& path) {
  return invalidUsage("%s: MSCCL XML import is not available: this build of Theseus did not find tinyxml2 "
                      "(install libtinyxml2-dev and rebuild)", path.c_str());
}

Result<std::shared_ptr<FixedSchedule>> loadMscclXml(const std::string& path) { return parseMscclXml("", path); }

}  // namespace theseus::schedule::user
