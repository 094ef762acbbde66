// bench_simulate: the simulator at the scale, 4096 ranks (dp32 × pp8 × cp4 × tp4) ×
// 64 micro-batches per replica, a 32-layer h4096 model at a 32K context on the long-tailed
// mix, for fixed and wlb.
//
//  simulate   planning and playing the steps, no database (the issue's < 10 s figure)
//  with DB    the same, writing the run database (events, workload rows, indexes)
//  baseline   TraceWriter alone writing as many events and workload rows, of the same
//             sizes, in the same bulk calls: what the store costs without any simulation.
// The ratio "with DB / baseline" is what the simulator adds to the store's own cost.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <vector>

#include "bench/common/bench_support.h"
#include "core/sim/simulator.h"
#include "core/store/trace_writer.h"
#include "core/util/text_table.h"

using namespace fulcrum;
using bench::Clock;
using bench::seconds_since;

namespace {

std::string fixed(double value, int decimals) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
    return buffer;
}

// The store alone: `lanes` lanes, `events` events and `rows` workload rows handed over in
// blocks of `block` events, like the simulator's one block per rank and step.
double write_baseline(const std::string& path, int lanes, std::int64_t events, std::int64_t rows,
                      std::size_t block) {
    bench::remove_run_file(path);
    const auto start = Clock::now();
    RunInfo run;
    run.origin = RunOrigin::simulated;
    auto writer = store::TraceWriter::create(path, run);
    if (!writer) {
        std::fprintf(stderr, "%s\n", writer.error().message.c_str());
        return -1;
    }
    std::vector<LaneId> ids;
    for (int rank = 0; rank < lanes; ++rank) {
        RankInfo info;
        info.rank = rank;
        info.dp = info.pp = info.cp = info.tp = 0;
        (*writer)->add_rank(info);
        ids.push_back((*writer)->add_lane(rank, LaneKind::host_thread, "main"));
    }
    const StringId name = (*writer)->intern("forward");
    std::vector<Event> buffer(block);
    std::int64_t written = 0;
    std::int64_t rows_written = 0;
    const std::int64_t rows_per_block =
        events > 0 ? (rows * static_cast<std::int64_t>(block) + events - 1) / events : 0;
    for (int lane = 0; written < events; lane = (lane + 1) % lanes) {
        const std::size_t count =
            static_cast<std::size_t>(std::min<std::int64_t>(block, events - written));
        for (std::size_t i = 0; i < count; ++i) {
            Event& e = buffer[i];
            e.lane = ids[static_cast<std::size_t>(lane)];
            e.name = name;
            e.start_ns = (written + static_cast<std::int64_t>(i)) * 1000;
            e.end_ns = e.start_ns + 800;
            e.step = 0;
            e.microbatch = static_cast<std::int32_t>(i % 64);
            e.stage = 0;
            e.category = Category::compute;
        }
        (*writer)->add_events(buffer.data(), count);
        written += static_cast<std::int64_t>(count);
        for (std::int64_t r = 0; r < rows_per_block && rows_written < rows; ++r, ++rows_written) {
            (*writer)->add_workload(
                {lane, 0, static_cast<std::int32_t>(r % 64), r, 4096, 0, 512, "fixed"});
        }
    }
    if (auto status = (*writer)->close(); !status) {
        std::fprintf(stderr, "%s\n", status.error().message.c_str());
        return -1;
    }
    return seconds_since(start);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"bench_simulate: the simulator at 4096 ranks x 64 micro-batches"};
    int steps = 1;
    int repeats = 3;
    std::string balancers = "fixed,wlb";
    std::string folder = std::filesystem::temp_directory_path().string();
    bool skip_db = false;
    sim::SimulationConfig config;
    config.model = {.layers = 32, .hidden = 4096, .heads = 32, .context = 32768, .vocab = 256};
    config.layout.grid = {.dp = 32, .tp = 4, .pp = 8, .cp = 4};
    config.layout.microbatches = 64;
    config.lengths = "long-tail:context=32768";
    config.documents = 100000;
    app.add_option("--steps", steps, "Steps per simulation")->capture_default_str();
    app.add_option("--repeats", repeats, "Runs of the simulation without a database (median)")
        ->capture_default_str();
    app.add_option("--balancers", balancers)->capture_default_str();
    app.add_option("--dp", config.layout.grid.dp)->capture_default_str();
    app.add_option("--pp", config.layout.grid.pp)->capture_default_str();
    app.add_option("--cp", config.layout.grid.cp)->capture_default_str();
    app.add_option("--tp", config.layout.grid.tp)->capture_default_str();
    app.add_option("--micro-batches", config.layout.microbatches)->capture_default_str();
    app.add_option("--dir", folder, "Where the databases are written (and removed)")
        ->capture_default_str();
    app.add_flag("--no-db", skip_db, "Only the simulation without a database");
    CLI11_PARSE(app, argc, argv);
    config.steps = steps;

    std::printf(
        "grid dp%d x pp%d x cp%d x tp%d = %d ranks, %d micro-batches per replica, "
        "%d step(s); model L%d h%d, context %d, %s\n\n",
        config.layout.grid.dp, config.layout.grid.pp, config.layout.grid.cp, config.layout.grid.tp,
        config.layout.grid.world(), config.layout.microbatches, steps, config.model.layers,
        config.model.hidden, config.model.context, config.lengths.c_str());
    using Align = TextTable::Align;
    TextTable table({"balancer", "simulate", "step (predicted)", "with DB", "events",
                     "workload rows", "store baseline", "with DB / baseline"},
                    {Align::left, Align::right, Align::right, Align::right, Align::right,
                     Align::right, Align::right, Align::right});
    std::stringstream list(balancers);
    std::string name;
    while (std::getline(list, name, ',')) {
        auto balancer = balance::parse_balancer(name);
        if (!balancer) {
            std::fprintf(stderr, "%s\n", balancer.error().message.c_str());
            return 2;
        }
        config.balancer = *balancer;
        std::vector<double> times;
        sim::SimulationResult result;
        for (int r = 0; r < repeats; ++r) {
            const auto start = Clock::now();
            auto played = sim::simulate(config, nullptr);
            times.push_back(seconds_since(start));
            if (!played) {
                std::fprintf(stderr, "%s\n", played.error().message.c_str());
                return 2;
            }
            result = *played;
        }
        std::sort(times.begin(), times.end());
        const double simulate_s = times[times.size() / 2];
        std::vector<std::string> row = {name, fixed(simulate_s, 3) + " s",
                                        fixed(result.mean_step_ns / 1e9, 3) + " s"};
        if (skip_db) {
            row.insert(row.end(), {"-", "-", "-", "-", "-"});
            table.add_row(row);
            continue;
        }
        const std::string path = folder + "/bench_simulate.fulcrum";
        bench::remove_run_file(path);
        sim::SimulationOutput output;
        output.path = path;
        const auto start = Clock::now();
        auto written = sim::simulate_to_file(config, output);
        const double with_db_s = seconds_since(start);
        if (!written) {
            std::fprintf(stderr, "%s\n", written.error().message.c_str());
            return 2;
        }
        const std::size_t block = static_cast<std::size_t>(
            written->events / (static_cast<std::int64_t>(config.layout.grid.world()) * steps));
        const double baseline_s =
            write_baseline(folder + "/bench_simulate_baseline.fulcrum", config.layout.grid.world(),
                           written->events, written->workload_rows, block);
        bench::remove_run_file(path);
        bench::remove_run_file(folder + "/bench_simulate_baseline.fulcrum");
        row.insert(row.end(), {fixed(with_db_s, 2) + " s", std::to_string(written->events),
                               std::to_string(written->workload_rows), fixed(baseline_s, 2) + " s",
                               fixed(with_db_s / baseline_s, 2) + "x"});
        table.add_row(row);
    }
    std::fputs(table.render().c_str(), stdout);
    return 0;
}
