#include "attrs/pattern.h"

namespace theseus::attrs {
namespace {

bool patternChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == ':' || c == '*' || c == '?';
}

// fnmatch-style match of one component: '*' any run, '?' one character.
bool matchComponent(std::string_view pat, std::string_view s) {
  size_t p = 0, i = 0, star = std::string_view::npos, mark = 0;
  while (i < s.size()) {
    if (p < pat.size() && (pat[p] == '?' || pat[p] == s[i])) {
      ++p;
      ++i;
    } else if (p < pat.size() && pat[p] == '*') {
      star = p++;
      mark = i;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      i = ++mark;
    } else {
      return false;
    }
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

}  // namespace

Result<Pattern> Pattern::compile(const std::string& text) {
  if (text.empty()) return invalidArgument("pattern is empty");
  Pattern p;
  p.text_ = text;
  size_t start = 0;
  bool prefixOpen = true;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != '.') {
      if (!patternChar(text[i]))
        return invalidArgument("pattern '%s': character %zu ('%c') is not one of [A-Za-z0-9_:-*?] or '.'",
                               text.c_str(), i + 1, text[i] >= 32 && text[i] < 127 ? text[i] : '?');
      continue;
    }
    if (i == start) return invalidArgument("pattern '%s' has an empty component at character %zu", text.c_str(), i + 1);
    std::string part = text.substr(start, i - start);
    bool wild = part.find_first_of("*?") != std::string::npos;
    if (part.find("**") != std::string::npos && part != "**")
      return invalidArgument("pattern '%s': '**' must be a whole component", text.c_str());
    if (wild) p.literal_ = false;
    if (prefixOpen) {
      if (wild) {
        p.prefix_ += part.substr(0, part.find_first_of("*?"));
        prefixOpen = false;
      } else {
        p.prefix_ += part;
        if (i < text.size()) p.prefix_ += '.';
      }
    }
    p.parts_.push_back(std::move(part));
    start = i + 1;
  }
  return p;
}

bool Pattern::matches(std::string_view name) const { return matchFrom(0, name); }

// `rest` is the unmatched tail of the name, matched against parts_[part...].
// Only '**' backtracks: it takes one component, then tries to hand the rest
// to the next part after each further component.
bool Pattern::matchFrom(size_t part, std::string_view rest) const {
  if (part == parts_.size()) return rest.empty();
  if (rest.empty()) return false;
  size_t dot = rest.find('.');
  std::string_view head = rest.substr(0, dot);
  std::string_view tail = dot == std::string_view::npos ? std::string_view() : rest.substr(dot + 1);
  if (parts_[part] != "**") return matchComponent(parts_[part], head) && matchFrom(part + 1, tail);
  while (true) {
    if (matchFrom(part + 1, tail)) return true;
    if (tail.empty()) return false;
    size_t next = tail.find('.');
    tail = next == std::string_view::npos ? std::string_view() : tail.substr(next + 1);
  }
}

}  // namespace theseus::attrs
