// File names with placeholders, as THESEUS_DECISION_LOG and THESEUS_FLIGHT_RECORDER_DUMP take them:
// %r = the rank, %p = the pid, %c = the communicator hash (16 hex digits); other text as given.
#pragma once

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <string>

namespace theseus {

inline std::string expandPathTemplate(const std::string& spec, int rank, uint64_t commHash) {
  std::string out;
  for (size_t i = 0; i < spec.size(); ++i) {
    if (spec[i] == '%' && i + 1 < spec.size()) {
      const char c = spec[i + 1];
      if (c == 'r') { out += std::to_string(rank); ++i; continue; }
      if (c == 'p') { out += std::to_string(getpid()); ++i; continue; }
      if (c == 'c') {
        char hash[24];
        snprintf(hash, sizeof(hash), "%016" PRIx64, commHash);
        out += hash;
        ++i;
        continue;
      }
    }
    out += spec[i];
  }
  return out;
}

}  // namespace theseus
