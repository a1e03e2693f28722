// Finding and talking to plugins written for NCCL's ABIs (tuner, profiler).
//
// Library names follow NCCL's rules, so a user's existing setting works
// unchanged: with NCCL_<TYPE>_PLUGIN unset, "<prefix>.so" is tried (absent is
// normal and silent); a value is tried as given (a name on the loader's
// search path or a path), then as "<prefix>-<value>.so"; "none" (any case)
// turns the plugin off; "STATIC_PLUGIN" looks the symbols up in the process
// itself. Like NCCL, a type whose own library is not found falls back to the
// net plugin library (NCCL_NET_PLUGIN), which may carry all three.
//
// Plugins get ncclPluginLogger() as their ncclDebugLogFunction: it formats the
// message and logs it as Theseus does (NCCL_DEBUG, NCCL_DEBUG_SUBSYS), naming
// the plugin being called (plugin::CallScope).
#pragma once

#include <memory>
#include <string>

#include "common/nccl_plugin_abi.h"
#include "common/plugin_library.h"
#include "common/status.h"

namespace theseus::plugin {

struct NcclPluginLookup {
  const char* what = "";     // "tuner plugin": for messages
  const char* prefix = "";   // "libnccl-tuner"
  const char* variable = ""; // "NCCL_TUNER_PLUGIN"
  std::string value;         // the variable's value ("" when unset)
  bool set = false;          // whether the variable is set
};

struct NcclPluginLibrary {
  std::unique_ptr<Library> library;  // null: no plugin (off, or unset and not found)
  std::string tried;                 // the names tried, for messages ("libnccl-tuner.so, ...")
  // The library is only a candidate: the default name with the variable unset, or NCCL_NET_PLUGIN's
  // library as the fallback. One that lacks the plugin's symbols is then no plugin, not an error.
  bool optional = false;
};

// The library NCCL would load for `lookup`. An error when the variable names a
// plugin and no candidate loads: the message lists what was tried and why the
// last candidate failed.
Result<NcclPluginLibrary> openNcclPlugin(const NcclPluginLookup& lookup);

// The logger handed to NCCL plugins (NCCL_LOG_WARN -> WARN, NCCL_LOG_TRACE ->
// TRACE, others INFO; `flags` are NCCL's subsystem bits, which ours equal).
extern "C" void ncclPluginLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                 const char* fmt, ...);

}  // namespace theseus::plugin
