// Fuzz target: flight-recorder dumps as theseus-doctor reads them
// (doctor/dump.h, doctor/dump_analysis.h).
//
// The bytes are one JSON text: an array of dumps (one per rank) or a single
// dump. Each element goes through parseDump, which must either accept it or
// say why naming the dump ("fuzz.<i>: <path>: <problem>"); never throw.
// Whatever parses is diagnosed as the doctor does - communicators grouped,
// mismatches, deaths, wait chains, then the measurements (links, hosts,
// stragglers, arrivals) - and the verdict is written as text and as JSON,
// which must itself be valid JSON that parses back. Seeds: the demo's dumps
// (`make run`, build/demo/*.fr.*), trimmed to their last operations, in
// arrays of 1-4 ranks, one with a mismatch and one with a rank that died.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "doctor/dump_analysis.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace theseus;
  if (fuzz::tooLong(size, 48 << 10)) return 0;
  const nlohmann::json j = nlohmann::json::parse(fuzz::text(data, size), nullptr, false);
  if (j.is_discarded()) return 0;
  std::vector<nlohmann::json> items;
  if (j.is_array()) {
    for (const auto& e : j) items.push_back(e);
  } else {
    items.push_back(j);
  }
  if (items.size() > 16) return 0;
  std::vector<doctor::RankDump> dumps;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string source = "fuzz." + std::to_string(i);
    auto d = doctor::parseDump(items[i], source);
    if (!d.isOk()) {
      FUZZ_CHECK(d.status().message().rfind(source, 0) == 0, "an error that does not name the dump: %s",
                 d.status().message().c_str());
      continue;
    }
    dumps.push_back(d.take());
  }
  const doctor::Diagnosis dx = doctor::diagnose(dumps);
  (void)doctor::toText(dx.verdict);
  const std::string out = doctor::toJson(dx.verdict, dx.placement).dump(-1, ' ', false,
                                                                         nlohmann::json::error_handler_t::replace);
  FUZZ_CHECK(!nlohmann::json::parse(out, nullptr, false).is_discarded(), "the verdict's JSON does not parse");
  return 0;
}
