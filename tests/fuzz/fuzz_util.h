// Shared by the fuzz targets (tests/fuzz/fuzz_<target>.cc).
//
// FUZZ_CHECK states a property every input must keep (a round trip that must
// reproduce its bytes, an error that must carry a message). A broken property
// aborts, which libFuzzer reports as a crash with the input saved; in the
// replay tests it fails the test.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_CHECK(cond, ...)                                                 \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "%s:%d: fuzz property broken: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                           \
      fprintf(stderr, "\n");                                                  \
      abort();                                                                \
    }                                                                         \
  } while (0)

namespace theseus::fuzz {

inline std::string text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Inputs longer than this are skipped (libFuzzer's -max_len keeps most below it
// anyway): beyond a few KB a parser only repeats what it did on the first KB,
// and every execution should stay in the milliseconds.
inline bool tooLong(size_t size, size_t limit) { return size > limit; }

}  // namespace theseus::fuzz
