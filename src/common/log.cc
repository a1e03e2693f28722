#include "common/log.h"

#include <strings.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "common/env.h"

namespace theseus::log {
namespace {

struct SubsysName {
  const char* name;
  uint64_t bit;
};
constexpr SubsysName kSubsysNames[] = {
    {"INIT", kInit},     {"COLL", kColl},         {"P2P", kP2P},         {"SHM", kShm},
    {"NET", kNet},       {"GRAPH", kGraph},       {"TUNING", kTuning},   {"ENV", kEnv},
    {"ALLOC", kAlloc},   {"CALL", kCall},         {"PROXY", kProxy},     {"NVLS", kNvls},
    {"BOOTSTRAP", kBootstrap}, {"REG", kReg},     {"PROFILE", kProfile}, {"RAS", kRas},
    {"SCHEDULE", kSchedule}, {"POLICY", kPolicy}, {"EPOCH", kEpoch},     {"ATTRS", kAttrs},
    {"EXEC", kExec},     {"ALL", kAll},
};

// Level -1 means "not initialised yet"; the first enabled() call reads the env.
std::atomic<int> gLevel{-1};
std::atomic<uint64_t> gMask{kInit | kBootstrap | kEnv};
std::mutex gInitMutex;
FILE* gFile = nullptr;
char gHost[64] = "";
thread_local int tDevice = -1;

// ncclGetLastError hands out a pointer its caller reads without a lock, while
// any thread may set a newer error meanwhile (a control loop that finds a peer
// dead). So each error is written into the next of a few buffers and then
// published: a text a caller holds stays intact until kLastErrorBuffers - 1
// newer errors were set.
constexpr unsigned kLastErrorBuffers = 8;
std::mutex gLastErrorMutex;                        // orders the writers
char gLastErrors[kLastErrorBuffers][2048];
unsigned gNextLastError = 0;                       // under gLastErrorMutex
std::atomic<const char*> gLastError{""};           // the newest, published

void initLocked() {
  const char* level = env::get("NCCL_DEBUG");
  int lv = static_cast<int>(Level::kNone);
  if (level != nullptr) {
    if (strcasecmp(level, "VERSION") == 0) lv = static_cast<int>(Level::kVersion);
    else if (strcasecmp(level, "WARN") == 0) lv = static_cast<int>(Level::kWarn);
    else if (strcasecmp(level, "INFO") == 0) lv = static_cast<int>(Level::kInfo);
    else if (strcasecmp(level, "ABORT") == 0) lv = static_cast<int>(Level::kAbort);
    else if (strcasecmp(level, "TRACE") == 0) lv = static_cast<int>(Level::kTrace);
  }
  const char* subsys = env::get("NCCL_DEBUG_SUBSYS");
  gMask.store(subsys ? parseSubsysMask(subsys) : (kInit | kBootstrap | kEnv));

  gethostname(gHost, sizeof(gHost) - 1);
  if (char* dot = strchr(gHost, '.')) *dot = '\0';

  if (gFile != nullptr && gFile != stdout) fclose(gFile);
  gFile = stdout;
  const char* path = env::get("NCCL_DEBUG_FILE");
  if (path != nullptr && lv > static_cast<int>(Level::kVersion)) {
    // Expand %h (host), %p (pid) and %% like NCCL.
    std::string name;
    for (const char* p = path; *p; ++p) {
      if (*p == '%' && p[1] == 'h') { name += gHost; ++p; }
      else if (*p == '%' && p[1] == 'p') { name += std::to_string(getpid()); ++p; }
      else if (*p == '%' && p[1] == '%') { name += '%'; ++p; }
      else name += *p;
    }
    if (FILE* f = fopen(name.c_str(), "w")) {
      setvbuf(f, nullptr, _IOLBF, 0);
      gFile = f;
    }
  }
  gLevel.store(lv, std::memory_order_release);
}

int currentLevel() {
  int lv = gLevel.load(std::memory_order_acquire);
  if (lv < 0) {
    std::lock_guard<std::mutex> lock(gInitMutex);
    if (gLevel.load() < 0) initLocked();
    lv = gLevel.load();
  }
  return lv;
}

const char* levelName(Level level) {
  switch (level) {
    case Level::kWarn: return "WARN";
    case Level::kInfo: return "INFO";
    case Level::kTrace: return "TRACE";
    case Level::kAbort: return "ABORT";
    case Level::kVersion: return "VERSION";
    default: return "";
  }
}

}  // namespace

uint64_t parseSubsysMask(const char* text) {
  bool invert = text[0] == '^';
  if (invert) ++text;
  uint64_t mask = 0;
  std::string all(text);
  size_t pos = 0;
  while (pos <= all.size()) {
    size_t comma = all.find(',', pos);
    std::string tok = all.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    for (const auto& s : kSubsysNames)
      if (strcasecmp(tok.c_str(), s.name) == 0) mask |= s.bit;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return invert ? ~mask : mask;
}

bool enabled(Level level, uint64_t subsys) {
  int lv = currentLevel();
  if (static_cast<int>(level) > lv) return false;
  if (level == Level::kInfo || level == Level::kTrace) return (gMask.load(std::memory_order_relaxed) & subsys) != 0;
  return true;
}

void message(Level level, uint64_t subsys, const char* file, int line, const char* fmt, ...) {
  char body[2048];
  va_list args;
  va_start(args, fmt);
  vsnprintf(body, sizeof(body), fmt, args);
  va_end(args);
  if (level == Level::kWarn) setLastError(body);
  if (!enabled(level, subsys)) return;

  long tid = syscall(SYS_gettid);
  char line_buf[2400];
  if (level == Level::kWarn) {
    const char* base = strrchr(file, '/');
    snprintf(line_buf, sizeof(line_buf), "\n%s:%d:%ld [%d] %s:%d NCCL WARN %s\n", gHost, getpid(), tid, tDevice,
             base ? base + 1 : file, line, body);
  } else if (level == Level::kTrace) {
    timeval tv;
    gettimeofday(&tv, nullptr);
    snprintf(line_buf, sizeof(line_buf), "%s:%d:%ld [%d] %ld.%06ld NCCL TRACE %s\n", gHost, getpid(), tid, tDevice,
             static_cast<long>(tv.tv_sec), static_cast<long>(tv.tv_usec), body);
  } else {
    snprintf(line_buf, sizeof(line_buf), "%s:%d:%ld [%d] NCCL %s %s\n", gHost, getpid(), tid, tDevice,
             levelName(level), body);
  }
  std::lock_guard<std::mutex> lock(gInitMutex);
  fputs(line_buf, gFile ? gFile : stdout);
  fflush(gFile ? gFile : stdout);
}

void resetFromEnv() {
  std::lock_guard<std::mutex> lock(gInitMutex);
  initLocked();
}

void setThreadDevice(int device) { tDevice = device; }

void setLastError(const std::string& text) {
  std::lock_guard<std::mutex> lock(gLastErrorMutex);
  char* buffer = gLastErrors[gNextLastError++ % kLastErrorBuffers];
  snprintf(buffer, sizeof(gLastErrors[0]), "%s", text.c_str());
  gLastError.store(buffer, std::memory_order_release);
}

const char* lastError() { return gLastError.load(std::memory_order_acquire); }

std::string printable(std::string_view text, size_t max) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    }
  }
  if (text.size() > max) out += "...";
  return out;
}

}  // namespace theseus::log
