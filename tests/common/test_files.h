// Small file helpers for tests: a whole file as a string, a fresh temporary directory.
#pragma once

#include <stdlib.h>

#include <fstream>
#include <sstream>
#include <string>

namespace theseus::test {

// The file's contents ("" when it cannot be read).
inline std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A new directory /tmp/<prefix>-XXXXXX ("" when it cannot be made).
inline std::string makeTempDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  return mkdtemp(tmpl.data()) != nullptr ? tmpl : std::string();
}

}  // namespace theseus::test
