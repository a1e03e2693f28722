// Logging with NCCL's conventions, so existing log parsers and habits work:
//   NCCL_DEBUG=VERSION|WARN|INFO|ABORT|TRACE   (unset: nothing but WARNs to last-error)
//   NCCL_DEBUG_SUBSYS=INIT,COLL,...|^list|ALL   (INFO/TRACE filter; default INIT,BOOTSTRAP,ENV)
//   NCCL_DEBUG_FILE=path with %h (host) and %p (pid)
// Lines look like "host:pid:tid [dev] NCCL INFO text". Every WARN also becomes the
// process's ncclGetLastError() text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace theseus::log {

enum class Level : int { kNone = 0, kVersion = 1, kWarn = 2, kInfo = 3, kAbort = 4, kTrace = 5 };

// NCCL's subsystem bits, then Theseus' own above bit 16.
enum Subsys : uint64_t {
  kInit = 0x1,
  kColl = 0x2,
  kP2P = 0x4,
  kShm = 0x8,
  kNet = 0x10,
  kGraph = 0x20,
  kTuning = 0x40,
  kEnv = 0x80,
  kAlloc = 0x100,
  kCall = 0x200,
  kProxy = 0x400,
  kNvls = 0x800,
  kBootstrap = 0x1000,
  kReg = 0x2000,
  kProfile = 0x4000,
  kRas = 0x8000,
  kSchedule = 0x10000,
  kPolicy = 0x20000,
  kEpoch = 0x40000,
  kAttrs = 0x80000,
  kExec = 0x100000,
  kAll = ~0ull,
};

// Cheap check used by the macros so disabled logging costs one load and a compare.
bool enabled(Level level, uint64_t subsys);
void message(Level level, uint64_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

// Re-reads NCCL_DEBUG* (ncclResetDebugInit).
void resetFromEnv();

// The device shown in "[dev]" for lines logged by this thread (-1: none).
void setThreadDevice(int device);

// The process-wide last error (ncclGetLastError). The pointer stays valid forever.
void setLastError(const std::string& text);
const char* lastError();

// Parses a NCCL_DEBUG_SUBSYS value into a mask (exposed for tests).
uint64_t parseSubsysMask(const char* text);

// Text from outside (a file's bytes, a parser's excerpt of them) made safe for a log line: control
// and non-ASCII bytes as \xNN, at most `max` bytes of it ("..." after).
std::string printable(std::string_view text, size_t max = 200);

}  // namespace theseus::log

#define TH_LOG_(level, subsys, ...)                                                  \
  do {                                                                               \
    if (::theseus::log::enabled(level, subsys))                                      \
      ::theseus::log::message(level, subsys, __FILE__, __LINE__, __VA_ARGS__);       \
  } while (0)

// WARN always records the last error, even when NCCL_DEBUG is unset.
#define TH_WARN(...) \
  ::theseus::log::message(::theseus::log::Level::kWarn, ::theseus::log::kAll, __FILE__, __LINE__, __VA_ARGS__)
#define TH_INFO(subsys, ...) TH_LOG_(::theseus::log::Level::kInfo, subsys, __VA_ARGS__)
#define TH_TRACE(subsys, ...) TH_LOG_(::theseus::log::Level::kTrace, subsys, __VA_ARGS__)
