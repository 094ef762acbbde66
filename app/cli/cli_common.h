// What every `fulcrum` subcommand shares: exit codes, error printing, progress lines.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "core/util/result.h"

namespace fulcrum::cli {

// Exit codes, documented in `fulcrum --help` and docs/cli.md.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 2;       // bad input, unreadable or unwritable file
inline constexpr int kExitIncomplete = 3;  // the output is shown, but the data is incomplete

int report_error(const Error& error);
void warn(const std::string& message);

// A command's output: to stdout when `path` is empty, else to the file, which appears only
// when complete and replaces an existing one only with `force` (core/util/output_file.h).
Status write_output(const std::string& path, bool force, std::string_view text);

// A progress callback that redraws one line on stderr when it is a terminal, and stays
// silent otherwise (logs, tests). Also stops the work when the user pressed Ctrl-C.
std::function<bool(double)> progress_line(std::string label);
void finish_progress_line();
void install_interrupt_handler();

}  // namespace fulcrum::cli
