// Command lines Fulcrum writes for its users: the one shell quoting (run.command, messages,
// the GUI's re-run), and the fulcrum-train and fulcrum simulate commands of a plan's layouts.
// core/ returns layouts as data (core/plan/planner.h); this is the one place that spells them
// as flags, so a flag renamed here is renamed in `fulcrum plan`'s output, its JSON and the
// GUI's re-run alike (docs/decisions.md, "Command lines outside core").
#pragma once

#include <string>
#include <vector>

#include "core/plan/hot_switch_search.h"
#include "core/plan/planner.h"

namespace fulcrum::launch {

// "mpirun -np 4 './my prog'": plain words bare, others in single quotes with '\'' for a
// quote, so that a POSIX shell splits the text back into `command`.
std::string shell_quote(const std::vector<std::string>& command);

// The layout's flags, the same for fulcrum-train and fulcrum simulate: --dp N --tp N --pp N
// --cp N --micro-batches N --schedule S [--virtual-stages V] [--stage-layers L,...]
// --recompute R [--sequence-parallel].
std::vector<std::string> layout_arguments(const plan::Candidate& candidate);

// `mpirun -np W fulcrum-train ...` and `fulcrum simulate ...` of a candidate the plan played:
// the same layout, packing, model, documents and seed.
std::vector<std::string> train_arguments(const plan::PlanRequest& request,
                                         const plan::Candidate& candidate);
std::vector<std::string> simulate_arguments(const plan::PlanRequest& request,
                                            const plan::Candidate& candidate);

// Fills train_command and simulate_command of every candidate the plan played (ranked), and
// of each hot-switch search's best spec: the static best's command lines with the spec in
// place of what fulcrum-train --hot-switch does not take.
void write_commands(const plan::PlanRequest& request, plan::PlanResult& result);
void write_commands(const plan::PlanRequest& request, const plan::PlanResult& result,
                    std::vector<plan::HotSwitchSearch>& searches);

}  // namespace fulcrum::launch
