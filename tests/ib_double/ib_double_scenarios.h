// The scenarios the ib_double test processes run: ib_double_test --ib-double-child <name> <role>.
// Each is one side of a test in ib_double_test.cc; a failed check ends the process with status 1.
#pragma once

#include <string>

namespace theseus::ibdouble {

using ScenarioFn = void (*)(const std::string& role);

// nullptr when there is no such scenario.
ScenarioFn findScenario(const std::string& name);

// Single-process scenarios (ib_double_api_scenarios.cc).
void apiDevices(const std::string& role);
void apiDefaultDevices(const std::string& role);
void apiNoDevices(const std::string& role);
void apiIdentity(const std::string& role);
void apiModifyQp(const std::string& role);
void apiResourceErrors(const std::string& role);
void apiRegMrFault(const std::string& role);
void apiCompletionChannel(const std::string& role);
void apiGarbageFrames(const std::string& role);

}  // namespace theseus::ibdouble
