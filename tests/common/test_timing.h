// Time limits in tests that check speed ("a million polls take well under a
// second") scale with the build: sanitizers slow every memory access down.
#pragma once

namespace theseus::test {

#if defined(__SANITIZE_THREAD__)
inline constexpr double kTimeScale = 10.0;
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr double kTimeScale = 3.0;
#else
inline constexpr double kTimeScale = 1.0;
#endif

}  // namespace theseus::test
