// fulcrum-synth: writes the rank files of a synthetic run (see synthetic_run.h).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "tests/support/synthetic_run.h"

int main(int argc, char** argv) {
    fulcrum::testing::SyntheticRunOptions options;
    std::string directory;
    CLI::App app{"Write the per-rank trace files of a synthetic 1F1B run (for demos and tests)",
                 "fulcrum-synth"};
    app.add_option("directory", directory, "Where to write rank-N.sqlite")->required();
    app.add_option("--dp", options.dp)->capture_default_str()->check(CLI::Range(1, 64));
    app.add_option("--pp", options.pp)->capture_default_str()->check(CLI::Range(1, 64));
    app.add_option("--cp", options.cp)->capture_default_str()->check(CLI::Range(1, 64));
    app.add_option("--tp", options.tp)->capture_default_str()->check(CLI::Range(1, 64));
    app.add_option("--steps", options.steps)->capture_default_str()->check(CLI::Range(1, 100000));
    app.add_option("--microbatches", options.microbatches)
        ->capture_default_str()
        ->check(CLI::Range(1, 4096));
    app.add_option("--layers", options.layers)->capture_default_str()->check(CLI::Range(1, 1024));
    app.add_option("--kernels-per-layer", options.kernels_per_layer)
        ->capture_default_str()
        ->check(CLI::Range(0, 1024));
    app.add_option("--seed", options.seed)->capture_default_str();
    app.add_option("--name", options.name)->capture_default_str();
    bool no_marks = false;
    app.add_flag("--no-clock-sync", no_marks,
                 "Omit the clock-sync marks (merge falls back to UTC offsets)");
    CLI11_PARSE(app, argc, argv);
    options.clock_sync_marks = !no_marks;
    auto paths = fulcrum::testing::write_synthetic_rank_files(directory, options);
    if (!paths) {
        std::fprintf(stderr, "fulcrum-synth: error: %s\n", paths.error().message.c_str());
        return 2;
    }
    std::printf("wrote %zu rank files to %s\n", paths->size(), directory.c_str());
    return 0;
}
