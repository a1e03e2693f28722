#include "common/env.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace theseus::env {
namespace {

// Applies NAME=VALUE lines ('#' starts a comment) without overriding the real environment.
void loadConfFile(const std::string& path) {
  FILE* f = fopen(path.c_str(), "r");
  if (f == nullptr) return;
  char line[4096];
  while (fgets(line, sizeof(line), f) != nullptr) {
    char* hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char* eq = strchr(line, '=');
    if (eq == nullptr) continue;
    *eq = '\0';
    std::string key(line), value(eq + 1);
    auto trim = [](std::string& s) {
      size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
      s = (b == std::string::npos) ? std::string() : s.substr(b, e - b + 1);
    };
    trim(key);
    trim(value);
    if (!key.empty()) setenv(key.c_str(), value.c_str(), /*overwrite=*/0);
  }
  fclose(f);
}

void loadConfFiles() {
  if (const char* conf = getenv("NCCL_CONF_FILE"); conf && *conf) {
    loadConfFile(conf);
  } else if (const char* home = getenv("HOME"); home && *home) {
    loadConfFile(std::string(home) + "/.nccl.conf");
  }
  loadConfFile("/etc/nccl.conf");
}

}  // namespace

const char* get(const char* name) {
  static std::once_flag once;
  std::call_once(once, loadConfFiles);
  const char* v = getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

}  // namespace theseus::env
