// The configuration registry. Every THESEUS_* knob and every NCCL_* variable we
// honour is declared exactly once, next to the code that uses it, with a type,
// a default and a help line:
//
//   static const IntKnob kSliceBytes("THESEUS_SLICE_BYTES", 128 << 10,
//                                    "Bytes per pipelined slice of a step");
//
// Declarations register themselves; `theseus-config --markdown` prints them all
// and a test keeps docs/configuration.md in sync. get() reads the environment
// each call (after NCCL config files), so read knobs at init time, not per
// collective.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace theseus {

enum class KnobType { kInt, kBool, kString, kDouble };

struct KnobInfo {
  const char* name;
  KnobType type;
  std::string defaultText;
  const char* help;
};

// All knobs linked into this binary, sorted by name.
std::vector<const KnobInfo*> allKnobs();
// The knob called `name` (exact), or null.
const KnobInfo* findKnob(const char* name);
// Its value now as text (the environment's, else the default); nullopt when
// unset without a default.
std::optional<std::string> knobValueText(const KnobInfo& info);
// The value in effect, comparable between processes: an integer knob as its decimal value
// ("128K" and "131072" are equal), anything else as set or its default ("" when unset).
std::string knobEffectiveText(const KnobInfo& info);
// Registers a knob (called by the knob constructors). Duplicate names are a bug and abort at startup
// of the test that checks the registry, not in the library.
void registerKnob(const KnobInfo* info);

// Integers accept 0x.., and K/M/G suffixes (binary multiples).
class IntKnob {
 public:
  IntKnob(const char* name, int64_t defaultValue, const char* help);
  int64_t get() const;
  bool isSet() const;
  const char* name() const { return info_.name; }

 private:
  KnobInfo info_;
  int64_t default_;
};

// Booleans accept 1/0, true/false, yes/no, on/off.
class BoolKnob {
 public:
  BoolKnob(const char* name, bool defaultValue, const char* help);
  bool get() const;
  const char* name() const { return info_.name; }

 private:
  KnobInfo info_;
  bool default_;
};

class DoubleKnob {
 public:
  DoubleKnob(const char* name, double defaultValue, const char* help);
  double get() const;
  const char* name() const { return info_.name; }

 private:
  KnobInfo info_;
  double default_;
};

class StringKnob {
 public:
  StringKnob(const char* name, const char* defaultValue, const char* help);
  // The value, or the default ("" when the default is null).
  std::string get() const;
  bool isSet() const;
  const char* name() const { return info_.name; }

 private:
  KnobInfo info_;
  const char* default_;
};

// Parsing helpers shared with other config readers (exposed for tests).
std::optional<int64_t> parseIntWithSuffix(const char* text);
std::optional<bool> parseBool(const char* text);

}  // namespace theseus
