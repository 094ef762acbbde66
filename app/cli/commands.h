// The subcommands of `fulcrum`. Each registers its options on the app and returns the
// function that runs it once parsing succeeded.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace fulcrum::cli {

using Command = std::function<int()>;

Command add_info_command(CLI::App& app);
Command add_merge_command(CLI::App& app);
Command add_export_command(CLI::App& app);
Command add_capture_command(CLI::App& app);
Command add_analyze_command(CLI::App& app);
Command add_simulate_command(CLI::App& app);
Command add_plan_command(CLI::App& app);
Command add_report_command(CLI::App& app);
Command add_import_command(CLI::App& app);
Command add_diff_command(CLI::App& app);

}  // namespace fulcrum::cli
