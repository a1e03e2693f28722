// theseus-schedule show: the text report of one program (steps per rank,
// bytes per link, alpha-beta cost and critical path).
#pragma once

#include <cstdio>

#include "schedule/ir.h"
#include "schedule/user/cost_model.h"

namespace theseus::tool {

void printSteps(FILE* out, const schedule::Program& p);
void printCost(FILE* out, const schedule::Program& p, const schedule::user::CostEstimate& cost, size_t bytes,
               const schedule::user::LinkParams& link);

}  // namespace theseus::tool
