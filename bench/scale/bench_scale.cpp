// bench_scale: `fulcrum analyze` and `fulcrum report` on issue 18's cluster-scale run (1024
// ranks, 100 M events: bench/common/scale_run.h), against one plain decode of every event block
// of the same file through TraceReader, the least any reader of the run must do.
//
// Each measured command runs as a child process, the real `fulcrum` binary, so that its peak
// resident memory (wait4's ru_maxrss of that child) is its own; the decode baseline runs in a
// forked child for the same reason. Targets (issue 37, on this 2-core machine): analyze and
// report each within 5 × the decode's wall time and 2 GB of peak memory, whatever the events
// (and ≤ 12 s at 100 M events; issue 18's were 30 s and 60 s). --calibrate and --compare add
// the other commands that read a whole run: `fulcrum simulate --calibrate` and a comparison
// report, untargeted (run with --fulcrum OLD and NEW for a before and after). --import exports
// the run's ranks as Kineto files and times `fulcrum import` of them, one worker against one
// per core (issue 37: ≥ 0.9 × cores), for runs of up to 20 M events. --repeats N runs every
// measurement N times in rounds and shows each row's median run.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "bench/common/bench_support.h"
#include "bench/common/scale_run.h"
#include "core/analysis/bubbles.h"
#include "core/analysis/collectives.h"
#include "core/analysis/communication.h"
#include "core/analysis/cost_model.h"
#include "core/analysis/cp_load.h"
#include "core/analysis/critical_path.h"
#include "core/analysis/hot_switch.h"
#include "core/analysis/imbalance.h"
#include "core/analysis/kernels.h"
#include "core/analysis/offload.h"
#include "core/analysis/passes.h"
#include "core/analysis/run_analysis.h"
#include "core/analysis/step_breakdown.h"
#include "core/store/trace_reader.h"
#include "core/util/text_table.h"

using namespace fulcrum;
using bench::Clock;
using bench::seconds_since;

namespace {

struct Measured {
    double wall_s = 0;
    double cpu_s = 0;  // user + system
    double peak_mb = 0;
    int exit_code = 0;
};

Measured finished(pid_t pid, Clock::time_point start) {
    Measured m;
    int status = 0;
    rusage usage{};
    if (wait4(pid, &status, 0, &usage) < 0) {
        m.exit_code = -1;
        return m;
    }
    m.wall_s = seconds_since(start);
    m.cpu_s = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
              static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    m.peak_mb = static_cast<double>(usage.ru_maxrss) / 1024.0;  // kB on Linux
    m.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return m;
}

// Runs `argv` with its standard output and error into `log`.
Measured run_command(const std::vector<std::string>& argv, const std::string& log) {
    const auto start = Clock::now();
    const pid_t pid = fork();
    if (pid == 0) {
        std::FILE* out = std::fopen(log.c_str(), "w");
        if (out != nullptr) {
            dup2(fileno(out), STDOUT_FILENO);
            dup2(fileno(out), STDERR_FILENO);
        }
        std::vector<char*> args;
        for (const std::string& arg : argv) {
            args.push_back(const_cast<char*>(arg.c_str()));
        }
        args.push_back(nullptr);
        execv(args[0], args.data());
        std::perror("execv");
        _exit(127);
    }
    return finished(pid, start);
}

// Decodes every block of the file once, keeping no event past its block.
int decode_every_block(const std::string& path) {
    auto reader = store::TraceReader::open(path);
    if (!reader) {
        std::fprintf(stderr, "bench_scale: %s\n", reader.error().message.c_str());
        return 1;
    }
    auto pack = reader->event_pack();
    if (!pack || !pack->has_value()) {
        std::fprintf(stderr, "bench_scale: '%s' has no event blocks\n", path.c_str());
        return 1;
    }
    std::vector<Event> block;
    std::int64_t events = 0, checksum = 0;
    auto consume = [&] {
        events += static_cast<std::int64_t>(block.size());
        for (const Event& event : block) {
            checksum += event.start_ns ^ event.end_ns;
        }
        block.clear();
    };
    // Each block is decoded into `block`; the one before it is consumed first.
    auto status = reader->scan_event_pack((*pack)->first_block, (*pack)->end_block,
                                          [&](LaneId) {
                                              consume();
                                              return &block;
                                          },
                                          {});
    consume();
    if (!status) {
        std::fprintf(stderr, "bench_scale: %s\n", status.error().message.c_str());
        return 1;
    }
    if (events != (*pack)->events) {
        std::fprintf(stderr, "bench_scale: decoded %lld events of %lld\n",
                     static_cast<long long>(events), static_cast<long long>((*pack)->events));
        return 1;
    }
    return checksum == 42 ? 3 : 0;  // uses the sum, so the decode cannot be optimised away
}

Measured decode_baseline(const std::string& path) {
    const auto start = Clock::now();
    const pid_t pid = fork();
    if (pid == 0) {
        _exit(decode_every_block(path));
    }
    return finished(pid, start);
}

// --stages: where analyze's time goes, each analysis of analyze_run alone and in turn on one
// thread (analyze_run runs two chains at once), in a forked child; printed as it goes.
int time_stages(const std::string& path, bool load_only) {
    auto at = Clock::now();
    auto lap = [&](const char* what) {
        std::printf("  %-28s %8.2f s\n", what, seconds_since(at));
        std::fflush(stdout);
        at = Clock::now();
    };
    auto reader = store::TraceReader::open(path);
    if (!reader) {
        std::fprintf(stderr, "bench_scale: %s\n", reader.error().message.c_str());
        return 1;
    }
    auto trace = analysis::load_run_trace(*reader);
    if (!trace) {
        std::fprintf(stderr, "bench_scale: %s\n", trace.error().message.c_str());
        return 1;
    }
    lap("load_run_trace");
    if (load_only) {
        return 0;
    }
    const auto passes = analysis::find_passes(*trace);
    lap("find_passes");
    const auto collectives = analysis::matched_collectives(*trace);
    lap("matched_collectives");
    auto model = analysis::fit_cost_model(*trace, passes, &collectives);
    lap("fit_cost_model");
    const analysis::CostModel* cost = model ? &*model : nullptr;
    const auto imbalance = analysis::analyze_imbalance(*trace, passes, collectives, cost);
    lap("analyze_imbalance");
    const auto offload = analysis::analyze_offload(*trace, cost, 2);
    lap("analyze_offload");
    const auto communication = analysis::summarize_collectives(*trace, collectives);
    lap("summarize_collectives");
    const auto paths = analysis::critical_paths(*trace, passes, &collectives);
    lap("critical_paths");
    const auto breakdown = analysis::step_breakdown(*trace);
    lap("step_breakdown");
    const auto bubbles = analysis::analyze_bubbles(*trace, passes);
    lap("analyze_bubbles");
    const auto cp_load = analysis::analyze_cp_load(*trace, passes);
    lap("analyze_cp_load");
    const auto kernels = analysis::analyze_kernels(*trace);
    lap("analyze_kernels");
    const auto hot = analysis::analyze_hot_switch(*trace);
    lap("analyze_hot_switch");
    auto whole = analysis::analyze_run(*trace);
    lap("analyze_run (all, 2 threads)");
    const std::string json = whole ? analysis::analysis_json(*whole) : std::string();
    lap("analysis_json");
    return json.empty() ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"bench_scale: fulcrum analyze and report on a 1024-rank, 100 M-event run"};
    int ranks = 1024;
    std::int64_t events = 100'000'000;
    std::string run_path;
    std::string fulcrum = FULCRUM_BINARY;
    bool json = false;
    bool calibrate = false;
    bool compare = false;
    bool remake = false;
    bool stages = false;
    bool load_only = false;
    bool import = false;
    int layers = bench::ScaleRunOptions{}.layers;
    int repeats = 1;
    app.add_option("--ranks", ranks, "Ranks of the run (a multiple of 64)")->capture_default_str();
    app.add_option("--events", events, "Events of the run")->capture_default_str();
    app.add_option("--layers", layers,
                   "Layers a pipeline stage: more make more events a step, so the same events "
                   "in fewer steps (memory against the events at a fixed number of steps)")
        ->capture_default_str()
        ->check(CLI::Range(1, 100000));
    app.add_option("--run", run_path,
                   "The run file (default /tmp/fulcrum-scale-RANKS-EVENTS.fulcrum); made when "
                   "missing, kept when made alike before");
    app.add_option("--fulcrum", fulcrum, "The fulcrum binary to measure")->capture_default_str();
    app.add_flag("--json", json, "Measure fulcrum analyze --json too");
    app.add_flag("--calibrate", calibrate,
                 "Measure fulcrum simulate --calibrate RUN --steps 1 too (the run's analysis "
                 "and one simulated step)");
    app.add_flag("--compare", compare,
                 "Measure fulcrum report RUN RUN too (a comparison: two analyses and the diff "
                 "by name)");
    app.add_flag("--remake", remake, "Write the run even when one made alike is there");
    app.add_flag("--stages", stages,
                 "Time load_run_trace and each analysis of analyze_run alone, in a child");
    app.add_flag("--load-only", load_only, "With --stages: stop after load_run_trace");
    app.add_flag("--import", import,
                 "Measure fulcrum import of the run's ranks as Kineto files too (fulcrum export "
                 "--per-rank, made once): one worker against one per core. About 230 bytes of "
                 "JSON an event, so for runs of up to 20 M events (--events 5000000: 7.3 M)");
    app.add_option("--repeats", repeats,
                   "Rounds of every measurement (the decode, then each command); each row shows "
                   "its median run, the range of its walls and its largest peak")
        ->capture_default_str()
        ->check(CLI::Range(1, 99));
    CLI11_PARSE(app, argc, argv);
    if (import && events > 20'000'000) {
        std::fprintf(stderr,
                     "bench_scale: --import writes ~230 bytes of JSON an event (%.0f GB here); "
                     "give --events 20000000 or fewer\n",
                     static_cast<double>(events) * 230 / 1e9);
        return 2;
    }
    if (run_path.empty()) {
        run_path =
            (std::filesystem::temp_directory_path() /
             ("fulcrum-scale-" + std::to_string(ranks) + "-" + std::to_string(events) +
              (layers == bench::ScaleRunOptions{}.layers ? ""
                                                         : "-layers" + std::to_string(layers)) +
              ".fulcrum"))
                .string();
    }

    auto options = bench::scale_run_options(ranks, events);
    if (!options) {
        std::fprintf(stderr, "bench_scale: %s\n", options.error().message.c_str());
        return 2;
    }
    options->layers = layers;
    std::printf("making %s (%d ranks, %lld events)...\n", run_path.c_str(), ranks,
                static_cast<long long>(events));
    std::fflush(stdout);
    auto file = bench::make_scale_run(run_path, *options, remake);
    if (!file) {
        std::fprintf(stderr, "bench_scale: %s\n", file.error().message.c_str());
        return 2;
    }
    const double mb = static_cast<double>(file->bytes) / 1e6;
    std::printf(
        "run: %lld events, %d steps, %.1f MB, %.2f bytes an event, %s\n",
        static_cast<long long>(file->events), file->steps, mb,
        static_cast<double>(file->bytes) / static_cast<double>(file->events),
        file->kept ? "kept from an earlier run"
                   : ("written in " + bench::cell(file->seconds, "%.1f") + " s (" +
                      bench::cell(static_cast<double>(file->events) / file->seconds / 1e6, "%.2f") +
                      " M events/s)")
                         .c_str());
    std::fflush(stdout);

    if (stages) {
        std::printf("stages of fulcrum analyze, one at a time:\n");
        std::fflush(stdout);
        const auto start = Clock::now();
        const pid_t pid = fork();
        if (pid == 0) {
            _exit(time_stages(run_path, load_only));
        }
        const Measured m = finished(pid, start);
        std::printf("  %-28s %8.2f s wall, %.2f s CPU, peak RSS %.0f MB\n", "all", m.wall_s,
                    m.cpu_s, m.peak_mb);
        return m.exit_code;
    }
    const std::string logs = run_path + ".bench";
    std::filesystem::create_directories(logs);
    // Each command, and the decode, in rounds (decode, analyze, report, …, then again), so
    // that a quieter or busier minute of this shared machine falls on every row alike; a row
    // shows its median run.
    struct Row {
        std::string what;
        std::function<Measured()> run;
        bool targeted = false;  // issue 37's: ≤ 5 × the decode's wall, ≤ 2 GB
        std::vector<Measured> runs;
    };
    std::vector<Row> rows;
    auto command = [&](const std::string& what, const std::vector<std::string>& argv,
                       const std::string& log) {
        return [&, what, argv, log] {
            std::printf("%s...\n", what.c_str());
            std::fflush(stdout);
            Measured m = run_command(argv, logs + "/" + log);
            if (m.exit_code != 0) {
                std::fprintf(stderr, "bench_scale: '%s' exited with %d; see %s/%s\n", what.c_str(),
                             m.exit_code, logs.c_str(), log.c_str());
            }
            return m;
        };
    };
    auto measure = [&](const std::string& what, const std::vector<std::string>& argv,
                       const std::string& log, bool targeted) {
        rows.push_back({what, command(what, argv, log), targeted, {}});
    };
    rows.push_back({"decode every block (baseline)",
                    [&] {
                        std::printf("decode baseline...\n");
                        std::fflush(stdout);
                        return decode_baseline(run_path);
                    },
                    false,
                    {}});
    measure("fulcrum analyze", {fulcrum, "analyze", run_path}, "analyze.txt", true);
    if (json) {
        measure("fulcrum analyze --json", {fulcrum, "analyze", run_path, "--json"}, "analyze.json",
                false);
    }
    measure("fulcrum report", {fulcrum, "report", run_path, "-o", logs + "/report.html", "--force"},
            "report.txt", true);
    if (calibrate) {
        measure("fulcrum simulate --calibrate",
                // The lengths as a run made before its config spelled them for the simulator.
                {fulcrum, "simulate", "--calibrate", run_path, "--steps", "1", "--lengths",
                 bench::kLengths},
                "calibrate.txt", false);
    }
    if (compare) {
        measure("fulcrum report (comparison)",
                {fulcrum, "report", run_path, run_path, "-o", logs + "/compare.html", "--force"},
                "compare.txt", false);
    }

    // The run's ranks as the PyTorch profiler's files, imported back: the many-files case of
    // `fulcrum import`, where the merge of a thousand small rank files is a large share.
    std::size_t import_one = 0;
    if (import) {
        const std::filesystem::path ranks_dir = logs + "/ranks";
        if (!std::filesystem::exists(ranks_dir / "rank-0.json")) {
            const Measured exported = command(
                "fulcrum export --per-rank (once)",
                {fulcrum, "export", "--per-rank", run_path, "-o", ranks_dir.string(), "--force"},
                "export.txt")();
            if (exported.exit_code != 0) {
                return 1;
            }
        }
        std::vector<std::string> files;
        for (const auto& entry : std::filesystem::directory_iterator(ranks_dir)) {
            if (entry.path().extension() == ".json") {
                files.push_back(entry.path().string());
            }
        }
        std::sort(files.begin(), files.end());
        const auto import_argv = [&](const char* threads) {
            std::vector<std::string> argv = {
                fulcrum, "import", "--threads", threads, "--force", "-o", logs + "/import.fulcrum"};
            argv.insert(argv.end(), files.begin(), files.end());
            return argv;
        };
        const std::string n = std::to_string(files.size());
        import_one = rows.size();
        measure("fulcrum import of " + n + " files, 1 worker", import_argv("1"), "import-1.txt",
                false);
        measure("fulcrum import of " + n + " files, every core", import_argv("0"), "import.txt",
                false);
    }

    for (int round = 0; round < repeats; ++round) {
        for (Row& row : rows) {
            row.runs.push_back(row.run());
        }
    }
    // A row's median run by wall time (the lower middle one of an even count), its peak the
    // largest of its runs, and the range of its walls.
    const auto median_of = [](const Row& row) {
        std::vector<Measured> runs = row.runs;
        std::sort(runs.begin(), runs.end(),
                  [](const Measured& a, const Measured& b) { return a.wall_s < b.wall_s; });
        Measured m = runs[(runs.size() - 1) / 2];
        for (const Measured& run : runs) {
            m.peak_mb = std::max(m.peak_mb, run.peak_mb);
            m.exit_code = m.exit_code != 0 ? m.exit_code : run.exit_code;
        }
        return m;
    };
    std::string import_ratio;
    if (import) {
        import_ratio = "import: every core " +
                       bench::cell(median_of(rows[import_one]).wall_s /
                                       std::max(median_of(rows[import_one + 1]).wall_s, 1e-9),
                                   "%.2f") +
                       "x one worker's rate (issue 37: >= 0.9 x cores)\n";
    }

    const Measured base = median_of(rows.front());
    std::vector<std::string> header = {
        "step",           "wall s", "CPU s", "peak RSS MB", "× decode (wall)",
        "× decode (CPU)", "target", "exit"};
    std::vector<TextTable::Align> align = {TextTable::Align::left,  TextTable::Align::right,
                                           TextTable::Align::right, TextTable::Align::right,
                                           TextTable::Align::right, TextTable::Align::right,
                                           TextTable::Align::left,  TextTable::Align::right};
    if (repeats > 1) {
        header.insert(header.begin() + 2, "wall range s");
        align.insert(align.begin() + 2, TextTable::Align::right);
    }
    TextTable table(header, align);
    for (const Row& row : rows) {
        const Measured m = median_of(row);
        std::string target;
        if (row.targeted) {
            const bool met = m.wall_s <= 5 * base.wall_s && m.peak_mb <= 2048;
            target = std::string("≤ 5× decode, ≤ 2 GB") + (met ? " (met)" : " (missed)");
        }
        std::vector<std::string> cells = {row.what,
                                          bench::cell(m.wall_s, "%.2f"),
                                          bench::cell(m.cpu_s, "%.2f"),
                                          bench::cell(m.peak_mb, "%.0f"),
                                          bench::cell(m.wall_s / base.wall_s, "%.1f"),
                                          bench::cell(m.cpu_s / std::max(base.cpu_s, 1e-3), "%.1f"),
                                          target,
                                          std::to_string(m.exit_code)};
        if (repeats > 1) {
            const auto [low, high] = std::minmax_element(
                row.runs.begin(), row.runs.end(),
                [](const Measured& a, const Measured& b) { return a.wall_s < b.wall_s; });
            cells.insert(cells.begin() + 2, bench::cell(low->wall_s, "%.2f") + "–" +
                                                bench::cell(high->wall_s, "%.2f"));
        }
        table.add_row(cells);
    }
    std::printf(
        "\n%lld events, %d ranks, %.1f MB (outputs and logs in %s)%s\n",
        static_cast<long long>(file->events), ranks, mb, logs.c_str(),
        repeats > 1
            ? (", the median of " + std::to_string(repeats) + " rounds; peak: the largest").c_str()
            : "");
    std::printf("%s%s", table.render("").c_str(), import_ratio.c_str());
    for (const Row& row : rows) {
        if (median_of(row).exit_code != 0) {
            return 1;
        }
    }
    return 0;
}
