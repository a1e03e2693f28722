#include "common/nccl_plugins.h"

#include <strings.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/knobs.h"
#include "common/log.h"

namespace theseus::plugin {
namespace {

// NCCL_NET_PLUGIN (declared by the transports); "" when unset.
std::string netPluginValue() {
  const KnobInfo* k = findKnob("NCCL_NET_PLUGIN");
  auto v = k != nullptr ? knobValueText(*k) : std::nullopt;
  return v ? *v : std::string();
}

// NCCL's candidates for a value: as given, then "<prefix>-<value>.so" unless
// the value already looks like a library name or a path.
std::vector<std::string> candidates(const char* prefix, const std::string& value) {
  std::vector<std::string> out{value};
  bool libraryLike = value.find('/') != std::string::npos || value.starts_with("lib") || value.ends_with(".so");
  if (!libraryLike) out.push_back(std::string(prefix) + "-" + value + ".so");
  return out;
}

}  // namespace

Result<NcclPluginLibrary> openNcclPlugin(const NcclPluginLookup& lookup) {
  NcclPluginLibrary out;
  if (lookup.set && strcasecmp(lookup.value.c_str(), "none") == 0) return out;
  if (lookup.set && lookup.value == "STATIC_PLUGIN") {
    TH_ASSIGN(out.library, Library::openSelf(lookup.what));
    out.tried = "the process itself (STATIC_PLUGIN)";
    return out;
  }
  std::vector<std::string> names =
      lookup.set && !lookup.value.empty() ? candidates(lookup.prefix, lookup.value)
                                          : std::vector<std::string>{std::string(lookup.prefix) + ".so"};
  std::string lastError;
  for (const std::string& name : names) {
    out.tried += (out.tried.empty() ? "" : ", ") + name;
    auto lib = Library::open(name, lookup.what);
    if (lib.isOk()) {
      out.library = lib.take();
      out.optional = !lookup.set;
      return out;
    }
    lastError = lib.status().message();
  }
  // NCCL's fallback: the net plugin library may carry tuner and profiler too.
  const std::string net = netPluginValue();
  if (strcmp(lookup.prefix, "libnccl-net") != 0 && !net.empty() && strcasecmp(net.c_str(), "none") != 0) {
    for (const std::string& name : candidates("libnccl-net", net)) {
      out.tried += ", " + name + " (NCCL_NET_PLUGIN)";
      auto lib = Library::open(name, lookup.what);
      if (lib.isOk()) {
        out.library = lib.take();
        out.optional = true;
        return out;
      }
    }
  }
  if (!lookup.set) return out;  // the default name is optional
  return invalidArgument("%s=%s: no %s could be loaded (tried %s): %s", lookup.variable, lookup.value.c_str(),
                         lookup.what, out.tried.c_str(), lastError.c_str());
}

extern "C" void ncclPluginLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                 const char* fmt, ...) {
  (void)file;
  (void)line;
  if (fmt == nullptr) return;
  const int ours = level == NCCL_LOG_WARN || level == NCCL_LOG_ABORT ? 2 : level == NCCL_LOG_TRACE ? 5 : 3;
  if (ours != 2 && !log::enabled(ours == 5 ? log::Level::kTrace : log::Level::kInfo, flags)) return;
  char text[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  logFromPlugin("NCCL plugin", flags != 0 ? flags : log::kInit, ours, 2, 5, text);
}

}  // namespace theseus::plugin
