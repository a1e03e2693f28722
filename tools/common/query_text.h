// A Theseus text query (include/theseus/theseus.h's buffer protocol: the decision log, the
// attributes, the flight recorder) as a std::string. The text may grow between the size query and
// the copy (an operation finished, an attribute was published): then it asks again. "" on error.
#pragma once

#include <cstring>
#include <string>

#include "nccl.h"

namespace theseus::tools {

inline std::string queryText(ncclComm_t comm, ncclResult_t (*fn)(ncclComm_t, char*, size_t, size_t*)) {
  size_t needed = 0;
  if (fn(comm, nullptr, 0, &needed) != ncclSuccess) return "";
  std::string text;
  do {
    text.assign(needed + 4096, '\0');
    if (fn(comm, text.data(), text.size(), &needed) != ncclSuccess) return "";
  } while (needed > text.size());
  text.resize(strlen(text.c_str()));
  return text;
}

}  // namespace theseus::tools
