// Fuzz target: MSCCL XML algorithms (schedule/user/msccl_import.h), the *.xml
// files THESEUS_SCHEDULES loads.
//
// The bytes are an XML document. tinyxml2 parses it; the import reads <algo>,
// <gpu>, <tb> and <step> elements with every attribute range-checked, merges
// each gpu's thread blocks into one step list by a topological order of
// "thread-block order + deps" (cycles are errors), re-lays out scratch so data
// keeps its position within a block (msccl_geometry.cc), and then the program
// goes through the same verifier and executor checks as a JSON schedule. A
// document that imports is used as the engine and the tools use it
// (fuzz_schedules.h: generate for every layout and root, verify again,
// executor templates, export to JSON - what `theseus-schedule export x.xml`
// does - and reload). Errors must be Statuses with messages, never crashes,
// sanitizer reports or exceptions.
#include "fuzz_schedules.h"
#include "schedule/user/msccl_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace theseus;
  if (fuzz::tooLong(size, 16 << 10)) return 0;
  auto s = schedule::user::parseMscclXml(fuzz::text(data, size), "fuzz.xml");
  if (!s.isOk()) {
    FUZZ_CHECK(!s.status().message().empty(), "an error without a message");
    return 0;
  }
  fuzz::exerciseSchedule(*s.value());
  return 0;
}
