// Loading C plugins: Theseus' schedule and policy plugins (include/theseus/)
// and the plugin ABIs NCCL defines (net, tuner, profiler) all go through this.
//
// A plugin is a shared object exporting a `const` descriptor struct under a
// versioned symbol ("theseusPolicyPlugin_v1", "ncclTunerPlugin_v4"). The
// loader asks for the symbols it can read, newest first, and takes the first
// one the library exports; when it exports none of them but a newer one, the
// error says so (the plugin was built for a newer library) instead of "not a
// plugin". Each older version the loader still reads gets an adapter in the
// plugin's own loader, so the rest of Theseus sees one version.
//
// Plugins log through a callback without a context argument; CallScope
// records, per thread, which plugin is being called so the callback can say
// who is talking (logFromPlugin).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"

namespace theseus::plugin {

class Library {
 public:
  // dlopen(RTLD_NOW | RTLD_LOCAL). `what` names the kind ("policy plugin") in errors.
  static Result<std::unique_ptr<Library>> open(const std::string& path, const char* what);
  // dlopen(NULL): the symbols of the program and the libraries it loaded.
  static Result<std::unique_ptr<Library>> openSelf(const char* what);
  ~Library();  // dlclose
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  struct Symbol {
    const void* address = nullptr;
    const char* name = nullptr;
    size_t index = 0;  // position in `known`: 0 is the newest version this loader reads
  };
  // The first of `known` (newest first) the library exports. Otherwise an
  // error: "exports <newer>, a newer <what> ABI than this Theseus reads" when it
  // exports one of `newer`, else "not a <what>: symbol <known[0]> not found".
  Result<Symbol> findVersioned(std::span<const char* const> known, std::span<const char* const> newer) const;
  // Any symbol, or nullptr.
  const void* find(const char* symbol) const;

  const std::string& path() const { return path_; }
  const char* what() const { return what_; }

 private:
  Library(void* handle, std::string path, const char* what) : handle_(handle), path_(std::move(path)), what_(what) {}
  void* handle_;
  std::string path_;
  const char* what_;
};

// Marks the calling thread as calling into the plugin `name` for the scope's lifetime (nests).
class CallScope {
 public:
  explicit CallScope(const char* name);
  ~CallScope();
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
  // The innermost plugin this thread is calling, or "?".
  static const char* current();

 private:
  const char* saved_;
};

// Logs what a plugin passed to its logger, as "<what> '<current plugin>': <message>":
// levels <= warnLevel as WARN, >= traceLevel as TRACE, others as INFO (subsystem: log::k* mask).
void logFromPlugin(const char* what, uint64_t subsystem, int level, int warnLevel, int traceLevel,
                   const char* message);

}  // namespace theseus::plugin
