// External attributes: a JSON file an operator's health agent writes.
//
//   THESEUS_ATTRS_FILE=/run/theseus/attrs.json
//   {"version": 1, "attributes": {"node.h1.nic.mlx5_0.healthy": 0, "link.0.3.penalty": 4}}
//
// Values are numbers or booleans (true = 1, false = 0). poll() stats the file
// and re-reads it only when it changed (inode, size, modification or change
// time, to the nanosecond), so calling it every policy interval costs one
// stat(). A file that parses replaces every value of source "file" in the
// store at once (names it no longer lists disappear); a malformed one is
// rejected with an error naming the file, the JSON path and the problem
// (logged as a WARN once per version of the file) and the previous values
// stay. A file that disappears clears the file's values; a file that was never
// there is not an error (the agent may not have written it yet).
//
// Writers should replace the file atomically (write a temporary file, then
// rename it over the old one), so a reader never sees half a file.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attrs/attribute_store.h"
#include "common/status.h"

namespace theseus::attrs {

class ExternalAttributes {
 public:
  static constexpr size_t kMaxFileBytes = 16 << 20;

  // "" disables polling.
  explicit ExternalAttributes(std::string path);
  // THESEUS_ATTRS_FILE, or "" when unset.
  static std::string configuredPath();

  const std::string& path() const { return path_; }

  // Applies the file to `store` when it changed since the last call. Returns
  // whether the store changed; an error when the file is malformed or cannot
  // be read (the store keeps its previous values).
  Result<bool> poll(AttributeStore& store);

  // Parses the file format; errors start with `where` (the file name).
  static Result<std::vector<std::pair<std::string, double>>> parse(const std::string& text, const std::string& where);

 private:
  struct FileId {
    bool exists = false;
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtimeNs = 0, ctimeNs = 0;
    bool operator==(const FileId&) const = default;
  };

  std::string path_;
  FileId seen_;        // the version last looked at (applied or rejected)
  bool applied_ = false;  // the store holds values from this file
};

}  // namespace theseus::attrs
