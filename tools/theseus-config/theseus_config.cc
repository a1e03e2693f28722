// theseus-config: prints every configuration knob Theseus declares (name,
// type, default, help), as text or as the Markdown table of
// docs/configuration.md (a test keeps that file in sync with this output);
// with --static-policy, the built-in static policy generated from the default
// choice's table (policies/static.json, kept equal by a test).
#include <cstdio>
#include <cstring>
#include <string>

#include "common/knobs.h"
#include "common/nccl_variables.h"
#include "policy/default_selector.h"

namespace {

const char* typeName(theseus::KnobType t) {
  switch (t) {
    case theseus::KnobType::kInt: return "int";
    case theseus::KnobType::kBool: return "bool";
    case theseus::KnobType::kString: return "string";
    case theseus::KnobType::kDouble: return "double";
  }
  return "?";
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else out += c;
  }
  return out;
}

int usage() {
  fprintf(stderr, "usage: theseus-config [--list | --markdown | --nccl-variables | --static-policy]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool markdown = false;
  if (argc > 2) return usage();
  if (argc == 2) {
    if (strcmp(argv[1], "--static-policy") == 0) {
      fputs(theseus::policy::staticPolicyText().c_str(), stdout);
      return 0;
    }
    if (strcmp(argv[1], "--nccl-variables") == 0) {
      // Every variable NVIDIA's NCCL reads and what it does here (docs/configuration.md).
      printf("| NCCL variable | In Theseus |\n|---|---|\n");
      for (const auto& v : theseus::ncclVariables())
        printf("| `%s` | %s%s |\n", v.name.c_str(), v.honoured ? "honoured: " : "no effect: ", escape(v.effect.c_str()).c_str());
      return 0;
    }
    if (strcmp(argv[1], "--markdown") == 0) markdown = true;
    else if (strcmp(argv[1], "--list") != 0) return usage();
  }
  auto knobs = theseus::allKnobs();
  if (markdown) {
    printf("| Variable | Type | Default | Meaning |\n|---|---|---|---|\n");
    for (const auto* k : knobs)
      printf("| `%s` | %s | %s | %s |\n", k->name, typeName(k->type),
             k->defaultText.empty() ? "(unset)" : ("`" + escape(k->defaultText) + "`").c_str(), escape(k->help).c_str());
    return 0;
  }
  for (const auto* k : knobs)
    printf("%-40s %-7s default=%-12s %s\n", k->name, typeName(k->type),
           k->defaultText.empty() ? "(unset)" : k->defaultText.c_str(), k->help);
  return 0;
}
