// make_scale_run: writes the cluster-scale synthetic run (bench/common/scale_run.h) to a file,
// for bench_scale, the GUI's scale checks and anyone who wants to open 100 M events.
// An existing file made with the same options is kept unless --force.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "bench/common/scale_run.h"

using namespace fulcrum;

int main(int argc, char** argv) {
    CLI::App app{"make_scale_run: a 1024-rank synthetic 4D run in one file (issue 18)"};
    int ranks = 1024;
    std::int64_t events = 100'000'000;
    std::string output = "/tmp/fulcrum-scale-100M.fulcrum";
    std::uint64_t seed = 1;
    int layers = bench::ScaleRunOptions{}.layers;
    bool force = false;
    app.add_option("--ranks", ranks, "Ranks: dp × tp 4 × pp 8 × cp 2, a multiple of 64")
        ->capture_default_str();
    app.add_option("--events", events, "Events to write (whole steps: the nearest count)")
        ->capture_default_str();
    app.add_option("-o,--output", output, "The run file")->capture_default_str();
    app.add_option("--seed", seed, "Seed of the documents")->capture_default_str();
    app.add_option("--layers", layers,
                   "Layers a pipeline stage: more make more events a step, so fewer steps for "
                   "the same events")
        ->capture_default_str()
        ->check(CLI::Range(1, 100000));
    app.add_flag("--force", force, "Write the file even when one made alike is there");
    CLI11_PARSE(app, argc, argv);

    auto options = bench::scale_run_options(ranks, events);
    if (!options) {
        std::fprintf(stderr, "make_scale_run: %s\n", options.error().message.c_str());
        return 2;
    }
    options->seed = seed;
    options->layers = layers;
    auto file = bench::make_scale_run(output, *options, force);
    if (!file) {
        std::fprintf(stderr, "make_scale_run: %s\n", file.error().message.c_str());
        return 1;
    }
    std::printf("%s %s: %lld events in %d steps on %d ranks, %.1f MB (%.2f bytes an event)",
                file->kept ? "kept" : "wrote", output.c_str(), static_cast<long long>(file->events),
                file->steps, ranks, static_cast<double>(file->bytes) / 1e6,
                static_cast<double>(file->bytes) /
                    static_cast<double>(std::max<std::int64_t>(file->events, 1)));
    if (!file->kept) {
        std::printf(", %.1f s (%.2f M events/s)", file->seconds,
                    static_cast<double>(file->events) / file->seconds / 1e6);
    }
    std::printf("\n");
    return 0;
}
