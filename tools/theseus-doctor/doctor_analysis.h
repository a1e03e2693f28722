// theseus-doctor's reasoning over flight-recorder dumps (telemetry/flight_recorder.h's JSON),
// one per rank of a communicator. Findings, most decisive first:
//   * mismatch      — ranks ran different operations at the same collective number (another
//                     collective, count or datatype): a bug in the program, named per rank;
//   * never_arrived — ranks that never started the newest collective the others started (their
//                     last operation is done, or older): the job waits for them;
//   * missing_dump  — ranks of the communicator with no dump (dead, or not dumped);
//   * waits_for     — what stuck ranks say they wait for ("waits for data from rank 1"), when
//                     it names a rank not already blamed;
//   * late_arrival  — a rank that starts collectives later than the others by a wide margin at
//                     the median (it straggles in compute), when the dumps share one host's clock.
// A finding lists its ranks, plain words, and the evidence (entries quoted).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace theseus::doctor {

struct Finding {
  std::string kind;
  std::vector<int> ranks;
  std::string words;
  std::vector<std::string> evidence;
};

// `dumps`: parsed files (any order; several communicators: the largest group is analysed, the
// others are reported in `notes`). Errors in a dump's structure are findings of kind "bad_dump".
std::vector<Finding> diagnose(const std::vector<nlohmann::json>& dumps, std::vector<std::string>* notes);

nlohmann::json toJson(const std::vector<Finding>& findings, const std::vector<std::string>& notes);

}  // namespace theseus::doctor
