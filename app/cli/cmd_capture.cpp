// fulcrum capture [-o DIR] [--gpu auto|on|off] [--force] -- COMMAND...: runs a command with
// the injection library attached to each of its processes, then merges the ranks' files
// into DIR/run.fulcrum and says what was recorded.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "app/launch/command_line.h"
#include "collectors/capture/capture.h"
#include "core/parallel/run_config.h"
#include "core/store/merge.h"
#include "core/store/trace_reader.h"
#include "core/util/text_table.h"

namespace fulcrum::cli {
namespace {

using collect::GpuRequest;
using collect::RankStatus;

struct CaptureArgs {
    std::string output;
    std::string gpu = "auto";
    std::string gpu_api = "work";
    bool force = false;
    std::vector<std::string> command;
};

std::string rank_list(const std::vector<std::int32_t>& ranks) {
    std::string text;
    for (const auto rank : ranks) {
        text += (text.empty() ? "" : ", ") + std::to_string(rank);
    }
    return text;
}

// One line per GPU situation for all ranks, instead of one per rank, said once the command
// ended: only then is it known which ranks it concerns.
void report_gpu_states(const std::vector<RankStatus>& statuses) {
    static const std::map<std::string, std::string> kMeaning = {
        {"none", "no GPU found"},
        {"other-profiler", "another CUDA profiler (Nsight Systems?) holds CUPTI"},
        {"unavailable", "libcupti was not found"},
        {"failed", "CUPTI refused (see the rank's message above)"},
    };
    std::map<std::string, std::vector<std::int32_t>> by_state;
    for (const auto& status : statuses) {
        if (kMeaning.contains(status.gpu)) {
            by_state[status.gpu].push_back(status.rank);
        }
    }
    for (const auto& [state, ranks] : by_state) {
        const std::string where =
            ranks.size() == statuses.size()
                ? ""
                : std::string(ranks.size() > 1 ? " on ranks " : " on rank ") + rank_list(ranks);
        std::fprintf(stderr, "fulcrum: %s%s; GPU tracing off, NVTX capture on\n",
                     kMeaning.at(state).c_str(), where.c_str());
    }
}

class ProgressLine {
public:
    ProgressLine() : terminal_(isatty(STDERR_FILENO) != 0) {}
    void show(double seconds, const std::vector<RankStatus>& statuses) {
        if (!terminal_) {
            return;
        }
        std::int64_t events = 0;
        for (const auto& status : statuses) {
            events += status.events;
        }
        std::fprintf(stderr, "\r\033[Krecording: %zu rank%s, %lld events, %d:%02d", statuses.size(),
                     statuses.size() == 1 ? "" : "s", static_cast<long long>(events),
                     static_cast<int>(seconds) / 60, static_cast<int>(seconds) % 60);
        std::fflush(stderr);
        shown_ = true;
    }
    void clear() {
        if (shown_) {
            std::fprintf(stderr, "\r\033[K");
            shown_ = false;
        }
    }

private:
    bool terminal_;
    bool shown_ = false;
};

void print_summary(const std::string& run_path, const store::MergeReport& report,
                   const collect::CommandOutcome& outcome, const std::string& command_line) {
    auto trace = store::TraceReader::open(run_path);
    if (!trace) {
        report_error(trace.error());
        return;
    }
    auto summary = trace->summary();
    if (!summary) {
        report_error(summary.error());
        return;
    }
    std::map<std::int32_t, std::int64_t> events_of_rank;
    std::map<std::uint32_t, std::int32_t> rank_of_lane;
    for (const auto& lane : trace->lanes()) {
        rank_of_lane[lane.id.value] = lane.rank;
    }
    for (const auto& [lane, count] : summary->events_per_lane) {
        events_of_rank[rank_of_lane[lane.value]] += count;
    }
    std::int64_t dropped = 0;
    std::vector<std::int32_t> incomplete;
    for (const auto& rank : report.ranks) {
        dropped += rank.dropped_records;
        if (!rank.complete) {
            incomplete.push_back(rank.rank);
        }
    }
    std::string kinds;
    for (int kind = 0; kind < kEventKindCount; ++kind) {
        if (summary->events_by_kind[kind] > 0) {
            kinds += (kinds.empty() ? "" : ", ") +
                     std::string(to_string(static_cast<EventKind>(kind))) + " " +
                     std::to_string(summary->events_by_kind[kind]);
        }
    }
    std::string out;
    out += "captured `" + command_line + "` (exit status " + std::to_string(outcome.exit_status) +
           ", " + format_duration(static_cast<std::int64_t>(outcome.seconds * 1e9)) + ")\n";
    out += "run      " + run_path + "\n";
    out += "ranks    " + std::to_string(report.ranks.size()) +
           (incomplete.empty() ? ", all complete" : ", incomplete: " + rank_list(incomplete)) +
           "\n";
    // The run's 4D grid: its config's, or what its ranks' coordinates span.
    out += "grid     " + describe_grid(parse_run_config(trace->run().config_json, report.ranks)) +
           "\n";
    out += "span     " + format_duration(summary->end_ns - summary->start_ns) + "\n";
    out += "events   " + std::to_string(summary->event_count) +
           (kinds.empty() ? "" : " (" + kinds + ")") + "\n";
    out += "dropped  " + std::to_string(dropped) + "\n";
    using Align = TextTable::Align;
    TextTable table(
        {"rank", "host", "pid", "dp", "pp", "cp", "tp", "events", "dropped", "clock", "status"},
        {Align::right, Align::left, Align::right, Align::right, Align::right, Align::right,
         Align::right, Align::right, Align::right, Align::left, Align::left});
    const auto coordinate = [](std::int32_t value) {
        return value >= 0 ? std::to_string(value) : std::string("-");
    };
    for (const auto& rank : report.ranks) {
        table.add_row({std::to_string(rank.rank), rank.host, std::to_string(rank.pid),
                       coordinate(rank.dp), coordinate(rank.pp), coordinate(rank.cp),
                       coordinate(rank.tp), std::to_string(events_of_rank[rank.rank]),
                       std::to_string(rank.dropped_records), std::string(to_string(rank.alignment)),
                       rank.complete ? "complete" : "INCOMPLETE"});
    }
    out += table.render("  ");
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
}

// Ranks on other hosts get only what `mpirun -x` names (docs/sources.md, "Launchers"); local ranks
// get the whole environment. A hint, because the command may well be local.
void hint_for_remote_mpi_ranks(const std::vector<std::string>& command, bool cuda_injection) {
    const std::string launcher = std::filesystem::path(command.front()).filename().string();
    if (launcher != "mpirun" && launcher != "mpiexec" && launcher != "orterun") {
        return;
    }
    const bool remote = std::any_of(command.begin(), command.end(), [](const std::string& arg) {
        return arg == "-H" || arg == "--host" || arg == "-host" || arg == "--hostfile" ||
               arg == "-hostfile" || arg == "--machinefile" || arg == "-machinefile";
    });
    const bool forwarded =
        std::find(command.begin(), command.end(), "NVTX_INJECTION64_PATH") != command.end();
    if (!remote || forwarded) {
        return;
    }
    std::string flags;
    for (const auto& name : collect::capture_variable_names(cuda_injection)) {
        flags += " -x " + name;
    }
    warn("ranks on other hosts record only if mpirun forwards the capture's variables: add" +
         flags + " (see docs/capture.md)");
}

int run_capture(const CaptureArgs& args, bool separator_given) {
    if (args.command.empty() || !separator_given) {
        return report_error({ErrorCode::invalid_input,
                             "give the command after `--`: fulcrum capture [options] -- "
                             "COMMAND..."});
    }
    const GpuRequest gpu = args.gpu == "off"  ? GpuRequest::off
                           : args.gpu == "on" ? GpuRequest::on
                                              : GpuRequest::automatic;
    const std::string command_line = launch::shell_quote(args.command);
    if (auto executable = collect::find_executable(args.command.front()); !executable) {
        return report_error(executable.error());
    }
    auto library = collect::find_injection_library();
    if (!library) {
        return report_error(library.error());
    }

    bool cuda_injection = gpu != GpuRequest::off;
    for (const auto& tool : collect::other_tools_attached(*library)) {
        if (tool.variable == "NVTX_INJECTION64_PATH") {
            std::fprintf(stderr,
                         "fulcrum: %s already points to %s (another tool, Nsight Systems?); "
                         "only one NVTX tool can attach, so fulcrum steps aside and runs the "
                         "command unrecorded\n",
                         tool.variable.c_str(), tool.library.c_str());
            auto outcome = collect::run_command(args.command, {}, {});
            if (!outcome) {
                return report_error(outcome.error());
            }
            return outcome->exit_status;
        }
        if (cuda_injection) {
            std::fprintf(stderr,
                         "fulcrum: %s already points to %s (another CUDA tool); GPU tracing "
                         "off, NVTX capture on\n",
                         tool.variable.c_str(), tool.library.c_str());
            cuda_injection = false;
        }
    }
    if (gpu == GpuRequest::on && !collect::gpu_present()) {
        return report_error({ErrorCode::invalid_input,
                             "--gpu on, but this machine has no usable GPU (no driver or no "
                             "device); use --gpu auto to capture NVTX only"});
    }

    const std::string directory =
        args.output.empty() ? collect::default_capture_directory(std::time(nullptr)) : args.output;
    if (auto prepared = collect::prepare_capture_directory(directory, args.force); !prepared) {
        return report_error(prepared.error());
    }
    hint_for_remote_mpi_ranks(args.command, cuda_injection);

    const auto environment =
        collect::capture_environment(*library, directory, cuda_injection ? gpu : GpuRequest::off,
                                     command_line, cuda_injection, args.gpu_api == "all");
    ProgressLine progress;
    auto outcome = collect::run_command(args.command, environment, [&](double seconds) {
        progress.show(seconds, collect::read_rank_statuses(directory));
    });
    progress.clear();
    if (!outcome) {
        return report_error(outcome.error());
    }
    const auto statuses = collect::read_rank_statuses(directory);
    report_gpu_states(statuses);
    const int command_status = outcome->exit_status;
    const auto failed = [&](int status) { return command_status != 0 ? command_status : status; };

    const auto files = collect::rank_files(directory);
    if (files.empty()) {
        const std::string none =
            std::string("made an NVTX call") + (cuda_injection ? " or started CUDA" : "");
        report_error({ErrorCode::invalid_input,
                      command_status != 0
                          ? "nothing was recorded: `" + command_line + "` exited with status " +
                                std::to_string(command_status) + " before any of its processes " +
                                none + " (its own messages above say why)"
                          : "nothing was recorded: no process of `" + command_line + "` " + none});
        return failed(kExitError);
    }
    for (const auto& status : statuses) {
        if (std::find(files.begin(), files.end(),
                      directory + "/rank-" + std::to_string(status.rank) + ".sqlite") ==
                files.end() &&
            status.state == "failed") {
            warn("rank " + std::to_string(status.rank) + " (pid " + std::to_string(status.pid) +
                 ") could not create its trace file; it is missing from the run");
        }
    }

    const std::string run_path = (std::filesystem::path(directory) / "run.fulcrum").string();
    store::MergeOptions options;
    options.overwrite = args.force;
    // One process that no launcher placed, or whose launcher says the job is one rank, is the
    // grid of one rank (MergeOptions::lone_process).
    options.lone_process = files.size() == 1 && statuses.size() == 1 &&
                           (statuses.front().launcher == "none" || statuses.front().world == 1);
    const bool terminal = isatty(STDERR_FILENO) != 0;
    options.progress = [terminal](double fraction) {
        if (terminal) {
            std::fprintf(stderr, "\r\033[Kmerging %3d%%", static_cast<int>(fraction * 100));
            std::fflush(stderr);
        }
        return !collect::interrupted_after_command();
    };
    auto report = store::merge_rank_files(files, run_path, options);
    if (terminal) {
        std::fprintf(stderr, "\r\033[K");
    }
    if (!report) {
        report_error(report.error());
        warn("the ranks' files are in '" + directory + "'; `fulcrum merge -o RUN " + directory +
             "` merges them (elsewhere, if this disk is full)");
        return failed(kExitError);
    }
    print_summary(run_path, *report, *outcome, command_line);
    for (const auto& warning : report->warnings) {
        warn(warning);
    }
    const bool incomplete = std::any_of(report->ranks.begin(), report->ranks.end(),
                                        [](const RankInfo& rank) { return !rank.complete; });
    if (command_status != 0) {
        warn("the command exited with status " + std::to_string(command_status) +
             "; the run holds what its ranks recorded");
        return command_status;
    }
    return incomplete ? kExitIncomplete : kExitOk;
}

}  // namespace

Command add_capture_command(CLI::App& app) {
    auto* sub = app.add_subcommand(
        "capture",
        "Run a command with every process it starts recording NVTX ranges (and GPU work via "
        "CUPTI when a GPU is there) into DIR/rank-N.sqlite, then merge them into "
        "DIR/run.fulcrum. Exit status: the command's; else 3 when a rank's recording is "
        "incomplete, 2 when nothing could be recorded or merged");
    auto args = std::make_shared<CaptureArgs>();
    sub->add_option("-o,--output", args->output,
                    "Capture directory (default: fulcrum-capture-YYYYmmdd-HHMMSS)");
    sub->add_option("--gpu", args->gpu,
                    "GPU tracing: auto (when a GPU is found), on (refuse without one), off")
        ->check(CLI::IsMember({"auto", "on", "off"}));
    sub->add_option("--gpu-api", args->gpu_api,
                    "CUDA API calls recorded: work (launches, copies, synchronisation, "
                    "allocation; not the queries that do none of these, such as "
                    "cudaGetDevice) or all")
        ->capture_default_str()
        ->check(CLI::IsMember({"work", "all"}));
    sub->add_flag("--force", args->force,
                  "Reuse a directory that holds an earlier capture, replacing it");
    sub->add_option("command", args->command, "The command to run, after `--`");
    // Everything after `--` is the command's, options included.
    sub->prefix_command();
    return [args, sub] {
        const auto remaining = sub->remaining();
        const bool separator =
            std::find(remaining.begin(), remaining.end(), "--") != remaining.end();
        const bool stray = std::any_of(remaining.begin(), remaining.end(),
                                       [](const std::string& arg) { return arg != "--"; });
        return run_capture(*args, separator && !stray);
    };
}

}  // namespace fulcrum::cli
