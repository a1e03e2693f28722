#include "common/knobs.h"

#include <strings.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/env.h"
#include "common/log.h"

namespace theseus {
namespace {

std::mutex& registryMutex() {
  static std::mutex m;
  return m;
}
std::vector<const KnobInfo*>& registry() {
  static std::vector<const KnobInfo*> r;
  return r;
}

void warnInvalid(const char* name, const char* value, const std::string& def) {
  TH_INFO(log::kEnv, "Invalid value '%s' for %s, using default %s", value, name, def.c_str());
}

}  // namespace

void registerKnob(const KnobInfo* info) {
  std::lock_guard<std::mutex> lock(registryMutex());
  registry().push_back(info);
}

const KnobInfo* findKnob(const char* name) {
  std::lock_guard<std::mutex> lock(registryMutex());
  for (const KnobInfo* k : registry())
    if (strcmp(k->name, name) == 0) return k;
  return nullptr;
}

std::optional<std::string> knobValueText(const KnobInfo& info) {
  if (const char* v = env::get(info.name)) return std::string(v);
  if (info.type == KnobType::kString && info.defaultText.empty()) return std::nullopt;
  return info.defaultText;
}

std::string knobEffectiveText(const KnobInfo& info) {
  std::optional<std::string> text = knobValueText(info);
  if (!text) return "";
  if (info.type == KnobType::kInt)
    if (auto v = parseIntWithSuffix(text->c_str())) return std::to_string(*v);
  return *text;
}

std::vector<const KnobInfo*> allKnobs() {
  std::lock_guard<std::mutex> lock(registryMutex());
  auto out = registry();
  std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return std::string(a->name) < b->name; });
  return out;
}

std::optional<int64_t> parseIntWithSuffix(const char* text) {
  if (text == nullptr || *text == '\0') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = strtoll(text, &end, 0);
  if (errno != 0 || end == text) return std::nullopt;
  int64_t mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1ll << 10, ++end;
  else if (*end == 'M' || *end == 'm') mult = 1ll << 20, ++end;
  else if (*end == 'G' || *end == 'g') mult = 1ll << 30, ++end;
  if (*end != '\0') return std::nullopt;
  return static_cast<int64_t>(v) * mult;
}

std::optional<bool> parseBool(const char* text) {
  if (text == nullptr) return std::nullopt;
  for (const char* t : {"1", "true", "yes", "on"})
    if (strcasecmp(text, t) == 0) return true;
  for (const char* f : {"0", "false", "no", "off"})
    if (strcasecmp(text, f) == 0) return false;
  return std::nullopt;
}

IntKnob::IntKnob(const char* name, int64_t defaultValue, const char* help)
    : info_{name, KnobType::kInt, std::to_string(defaultValue), help}, default_(defaultValue) {
  registerKnob(&info_);
}
int64_t IntKnob::get() const {
  const char* v = env::get(info_.name);
  if (v == nullptr) return default_;
  auto parsed = parseIntWithSuffix(v);
  if (!parsed) {
    warnInvalid(info_.name, v, info_.defaultText);
    return default_;
  }
  return *parsed;
}
bool IntKnob::isSet() const { return env::get(info_.name) != nullptr; }

BoolKnob::BoolKnob(const char* name, bool defaultValue, const char* help)
    : info_{name, KnobType::kBool, defaultValue ? "1" : "0", help}, default_(defaultValue) {
  registerKnob(&info_);
}
bool BoolKnob::get() const {
  const char* v = env::get(info_.name);
  if (v == nullptr) return default_;
  auto parsed = parseBool(v);
  if (!parsed) {
    warnInvalid(info_.name, v, info_.defaultText);
    return default_;
  }
  return *parsed;
}

DoubleKnob::DoubleKnob(const char* name, double defaultValue, const char* help)
    : info_{name, KnobType::kDouble, std::to_string(defaultValue), help}, default_(defaultValue) {
  registerKnob(&info_);
}
double DoubleKnob::get() const {
  const char* v = env::get(info_.name);
  if (v == nullptr) return default_;
  char* end = nullptr;
  double d = strtod(v, &end);
  if (end == v || *end != '\0') {
    warnInvalid(info_.name, v, info_.defaultText);
    return default_;
  }
  return d;
}

StringKnob::StringKnob(const char* name, const char* defaultValue, const char* help)
    : info_{name, KnobType::kString, defaultValue ? defaultValue : "", help}, default_(defaultValue) {
  registerKnob(&info_);
}
std::string StringKnob::get() const {
  const char* v = env::get(info_.name);
  if (v != nullptr) return v;
  return default_ ? default_ : "";
}
bool StringKnob::isSet() const { return env::get(info_.name) != nullptr; }

}  // namespace theseus
