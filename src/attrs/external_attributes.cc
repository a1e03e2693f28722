#include "attrs/external_attributes.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/knobs.h"
#include "common/log.h"

namespace theseus::attrs {
namespace {

const StringKnob kAttrsFile("THESEUS_ATTRS_FILE", nullptr,
                            "JSON file of operator-provided attributes ({\"version\":1,\"attributes\":{name: number}}), "
                            "re-read when it changes; see docs/attributes.md");

std::string jsonTypeName(const nlohmann::json& v) { return v.type_name(); }

}  // namespace

ExternalAttributes::ExternalAttributes(std::string path) : path_(std::move(path)) {}

std::string ExternalAttributes::configuredPath() { return kAttrsFile.get(); }

// Cold path: the JSON library's exceptions are caught here.
Result<std::vector<std::pair<std::string, double>>> ExternalAttributes::parse(const std::string& text,
                                                                               const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return invalidArgument("%s: not valid JSON: %s", where.c_str(), log::printable(e.what()).c_str());
  }
  if (!j.is_object()) return invalidArgument("%s: the top level must be an object", where.c_str());
  for (const auto& [key, value] : j.items()) {
    if (key != "version" && key != "attributes" && key != "comment")
      return invalidArgument("%s: unknown field '%s' (expected \"version\", \"attributes\", \"comment\")",
                             where.c_str(), log::printable(key, 64).c_str());
  }
  auto version = j.find("version");
  if (version == j.end()) return invalidArgument("%s: field 'version' is missing (expected 1)", where.c_str());
  if (!version->is_number_integer() || version->get<int64_t>() != 1)
    return invalidArgument("%s: field 'version' must be 1 (got %s)", where.c_str(),
                           log::printable(version->dump(), 64).c_str());
  auto attrs = j.find("attributes");
  if (attrs == j.end()) return invalidArgument("%s: field 'attributes' is missing", where.c_str());
  if (!attrs->is_object())
    return invalidArgument("%s: field 'attributes' must be an object of name: number (got %s)", where.c_str(),
                           jsonTypeName(*attrs).c_str());
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [name, value] : attrs->items()) {
    Status st = checkName(name);
    if (!st.isOk())
      return invalidArgument("%s: attributes.%s: %s", where.c_str(), log::printable(name, 64).c_str(),
                             log::printable(st.message()).c_str());
    double v;
    if (value.is_boolean()) {
      v = value.get<bool>() ? 1.0 : 0.0;
    } else if (value.is_number()) {
      v = value.get<double>();
    } else {
      return invalidArgument("%s: attributes.%s: expected a number or a boolean, got %s", where.c_str(), name.c_str(),
                             jsonTypeName(value).c_str());
    }
    if (!std::isfinite(v))
      return invalidArgument("%s: attributes.%s: %g is not a finite number", where.c_str(), name.c_str(), v);
    out.emplace_back(name, v);
  }
  return out;
}

Result<bool> ExternalAttributes::poll(AttributeStore& store) {
  if (path_.empty()) return false;
  FileId id;
  struct stat st;
  if (stat(path_.c_str(), &st) == 0) {
    id.exists = true;
    id.dev = st.st_dev;
    id.ino = st.st_ino;
    id.size = st.st_size;
    id.mtimeNs = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    id.ctimeNs = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  } else if (errno != ENOENT && errno != ENOTDIR) {
    return errnoStatus(errno, "THESEUS_ATTRS_FILE %s: cannot stat it", path_.c_str());
  }
  if (id == seen_) return false;
  seen_ = id;

  if (!id.exists) {
    if (!applied_) return false;
    applied_ = false;
    TH_INFO(log::kAttrs, "attributes file %s disappeared; its values are cleared", path_.c_str());
    TH_CHECK(store.replaceSource(Source::kFile, {}));
    return true;
  }
  Status error;
  std::vector<std::pair<std::string, double>> values;
  if (id.size > static_cast<off_t>(kMaxFileBytes)) {
    error = invalidArgument("%s: %lld bytes, more than the limit of %zu", path_.c_str(),
                            static_cast<long long>(id.size), kMaxFileBytes);
  } else {
    std::ifstream in(path_, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in.good() && !in.eof()) {
      error = errnoStatus(errno, "%s: cannot read it", path_.c_str());
    } else {
      auto parsed = parse(text.str(), path_);
      if (parsed.isOk()) values = parsed.take();
      else error = parsed.status();
    }
  }
  if (!error.isOk()) {
    TH_WARN("%s; keeping the previous attribute values", error.message().c_str());
    return error;
  }
  TH_CHECK(store.replaceSource(Source::kFile, values));
  applied_ = true;
  TH_INFO(log::kAttrs, "attributes file %s applied: %zu values", path_.c_str(), values.size());
  return true;
}

}  // namespace theseus::attrs
