// bench_kineto: the Kineto JSON importer's throughput (issue 18: >= 300 MB/s for one file,
// >= 200 MB/s for the whole `fulcrum import`) and memory, against a baseline in the same run:
// reading the same bytes through zlib's gzread without parsing anything. Wall and CPU seconds
// of each stage: the parser alone, import_file (a rank file), and the whole `fulcrum import`
// (a rank file, then merge into the run).
//
//   bench_kineto [--mb 200] [--file /tmp/fulcrum-bench-kineto-200mb.json] [--parse-only]
//   bench_kineto --files 8 [--mb 100] [--repeats 3]    (import of several files, issue 37)
//
// The synthetic trace (cached in /tmp) looks like a real rank's: ProfilerSteps holding
// cpu_ops, cudaLaunchKernel calls and their kernels on two streams, NCCL kernels, copies, flows.
#include <sys/resource.h>
#include <zlib.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/import/importer.h"
#include "core/trace/memory_sink.h"
#include "import_timing.h"

using namespace fulcrum;
using namespace fulcrum::bench;
namespace fs = std::filesystem;

namespace {
void generate(const std::string& path, std::size_t target_bytes, int rank = 0) {
    std::ofstream out(path, std::ios::binary);
    out << "{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [{\"id\": 0, \"name\": \"NVIDIA "
           "H100\"}],\n"
           "  \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": "
        << rank
        << ", \"world_size\": 8},\n  "
           "\"traceEvents\": [\n";
    std::size_t written = 0;
    long long corr = 1;
    double t = 1000.0;
    char line[1024];
    auto emit = [&](int n) {
        out.write(line, n);
        written += static_cast<std::size_t>(n);
    };
    for (int step = 0; written < target_bytes; ++step) {
        const double step_start = t;
        emit(std::snprintf(line, sizeof line,
                           "  {\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": "
                           "\"ProfilerStep#%d\", \"pid\": 4242, \"tid\": 4242, \"ts\": %.3f, "
                           "\"dur\": %.3f, \"args\": {\"External id\": %lld}},\n",
                           step, step_start, 5000.0 * 40 + 10, corr));
        for (int op = 0; op < 5000; ++op) {
            const long long c = corr++;
            emit(std::snprintf(
                line, sizeof line,
                "  {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"pid\": 4242, "
                "\"tid\": 4242, \"ts\": %.3f, \"dur\": 30.125, \"args\": {\"External id\": %lld, "
                "\"Record function id\": 0, \"Sequence number\": %d, \"Fwd thread id\": 0, \"Input "
                "Dims\": [[4096, 4096], [4096, 4096]], \"Input type\": [\"c10::BFloat16\", "
                "\"c10::BFloat16\"]}},\n",
                t + 1, c, op));
            emit(std::snprintf(
                line, sizeof line,
                "  {\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", "
                "\"pid\": 4242, \"tid\": 4242, \"ts\": %.3f, \"dur\": 4.250, \"args\": {\"External "
                "id\": %lld, \"cbid\": 211, \"correlation\": %lld}},\n",
                t + 20, c, c));
            const bool nccl = op % 50 == 0;
            if (nccl) {
                emit(std::snprintf(
                    line, sizeof line,
                    "  {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": "
                    "\"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
                    "\", \"pid\": 0, \"tid\": 20, \"ts\": %.3f, \"dur\": 120.5, \"args\": "
                    "{\"External id\": %lld, \"device\": 0, \"stream\": 20, \"correlation\": %lld, "
                    "\"Collective name\": \"allreduce\", \"In msg nelems\": 1048576, \"dtype\": "
                    "\"BFloat16\"}},\n",
                    t + 25, c, c));
            } else if (op % 97 == 0) {
                emit(std::snprintf(
                    line, sizeof line,
                    "  {\"ph\": \"X\", \"cat\": \"gpu_memcpy\", \"name\": \"Memcpy HtoD (Pinned -> "
                    "Device)\", \"pid\": 0, \"tid\": 21, \"ts\": %.3f, \"dur\": 12.0, \"args\": "
                    "{\"External id\": %lld, \"device\": 0, \"stream\": 21, \"correlation\": %lld, "
                    "\"bytes\": 4194304, \"memory bandwidth (GB/s)\": 349.5}},\n",
                    t + 25, c, c));
            } else {
                emit(std::snprintf(
                    line, sizeof line,
                    "  {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": "
                    "\"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_"
                    "warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas\", \"pid\": 0, "
                    "\"tid\": 7, \"ts\": %.3f, \"dur\": 35.75, \"args\": {\"External id\": %lld, "
                    "\"queued\": 0, \"device\": 0, \"context\": 1, \"stream\": 7, \"correlation\": "
                    "%lld, \"registers per thread\": 168, \"shared memory\": 213248, \"blocks per "
                    "SM\": 0.87, \"warps per SM\": 3.5, \"grid\": [132, 1, 1], \"block\": [384, 1, "
                    "1], \"est. achieved occupancy %%\": 0}},\n",
                    t + 25, c, c));
            }
            emit(std::snprintf(line, sizeof line,
                               "  {\"ph\": \"s\", \"id\": %lld, \"pid\": 4242, \"tid\": 4242, "
                               "\"ts\": %.3f, \"cat\": \"ac2g\", \"name\": \"ac2g\"},\n",
                               c, t + 20));
            t += 40;
        }
        t += 10;
    }
    out << "  {\"name\": \"Record Window End\", \"ph\": \"i\", \"s\": \"g\", \"pid\": \"\", "
           "\"tid\": \"\", \"ts\": "
        << t
        << "}\n  ],\n  \"traceName\": \"bench\",\n  \"displayTimeUnit\": \"ms\",\n  "
           "\"baseTimeNanoseconds\": 1700000000000000000\n}\n";
}
// `fulcrum import` of `files` rank files of `mb` MB each: one worker (the baseline) against
// one per core, `repeats` pairs in the same run, in the order AB BA AB … after one plain read
// of every file (so that neither side gets the page cache first); each pair's ratio is a
// speedup, and the median of them is the figure, as neighbours on a shared machine move any
// single pair.
int import_side_by_side(int files, int mb, int repeats) {
    std::vector<std::string> inputs;
    double total_mb = 0;
    for (int rank = 0; rank < files; ++rank) {
        const std::string path = "/tmp/fulcrum-bench-kineto-" + std::to_string(mb) + "mb-rank" +
                                 std::to_string(rank) + ".json";
        std::error_code ec;
        if (!fs::exists(path, ec) || fs::file_size(path, ec) < std::uintmax_t(mb) * 1000000) {
            std::printf("generating %s ...\n", path.c_str());
            generate(path, std::size_t(mb) * 1000000, rank);
        }
        inputs.push_back(path);
        total_mb += double(fs::file_size(path)) / 1e6;
    }
    for (const std::string& path : inputs) {
        std::ifstream in(path, std::ios::binary);
        std::vector<char> buffer(1 << 20);
        while (in.read(buffer.data(), std::streamsize(buffer.size())) || in.gcount() > 0) {
        }
    }
    const fs::path dir = fs::temp_directory_path() / "fulcrum-bench-kineto-files";
    fs::remove_all(dir);
    fs::create_directories(dir);
    auto import_with = [&](int threads) {
        importer::ImportOptions options;
        options.overwrite = true;
        options.threads = threads;
        Result<importer::ImportReport> run = importer::ImportReport{};
        const Timing t = timed(
            [&] { run = importer::import_files(inputs, (dir / "run.fulcrum").string(), options); });
        if (!run) {
            std::fprintf(stderr, "import_files failed: %s\n", run.error().message.c_str());
            std::exit(1);
        }
        return std::pair{t, run->events};
    };
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const std::string label = "fulcrum import, " +
                              std::to_string(std::min<unsigned>(cores, unsigned(files))) +
                              " workers";
    print_header();
    std::vector<double> ratios;
    bool same = true;
    std::int64_t events = -1;
    for (int pair = 0; pair < repeats; ++pair) {
        Timing one, all;
        std::int64_t one_events = 0, all_events = 0;
        if (pair % 2 == 0) {
            std::tie(one, one_events) = import_with(1);
            std::tie(all, all_events) = import_with(0);
        } else {
            std::tie(all, all_events) = import_with(0);
            std::tie(one, one_events) = import_with(1);
        }
        same = same && one_events == all_events && (events < 0 || events == one_events);
        events = one_events;
        print_row("fulcrum import, 1 worker (baseline)", one, total_mb, one);
        print_row(label.c_str(), all, total_mb, one);
        ratios.push_back(one.wall / all.wall);
    }
    std::sort(ratios.begin(), ratios.end());
    std::printf("%d files, %.1f MB, %lld events (%s); %u cores\n", files, total_mb,
                static_cast<long long>(events), same ? "the same in every run" : "DIFFERENT",
                cores);
    std::printf("workers' speedup over one, median of %d pairs: %.3fx (pairs %.3fx to %.3fx)\n",
                repeats, ratios[ratios.size() / 2], ratios.front(), ratios.back());
    fs::remove_all(dir);
    return same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "bench_kineto: Kineto JSON import MB/s and peak RSS against a plain gzread of the same "
        "bytes"};
    int mb = 200;
    std::string file;
    bool parse_only = false;
    app.add_option("--mb", mb, "size of the synthetic trace in MB");
    app.add_option("--file", file, "a Kineto JSON to import instead (plain or .gz)");
    app.add_flag("--parse-only", parse_only,
                 "only the baseline and the parser into a counting sink");
    int files = 0;
    int repeats = 3;
    app.add_option("--files", files,
                   "instead: `fulcrum import` of this many rank files of --mb MB each, one "
                   "worker against one per core (issue 37)");
    app.add_option("--repeats", repeats,
                   "with --files: pairs of runs (one worker, every worker), alternated; the "
                   "median ratio is the figure")
        ->capture_default_str()
        ->check(CLI::Range(1, 99));
    CLI11_PARSE(app, argc, argv);
    if (files > 0) {
        return import_side_by_side(files, mb, repeats);
    }
    if (file.empty()) {
        file = "/tmp/fulcrum-bench-kineto-" + std::to_string(mb) + "mb.json";
        std::error_code ec;
        if (!fs::exists(file, ec) || fs::file_size(file, ec) < std::uintmax_t(mb) * 1000000) {
            std::printf("generating %s ...\n", file.c_str());
            generate(file, std::size_t(mb) * 1000000);
        }
    }
    const double size_mb = double(fs::file_size(file)) / 1e6;
    const double rss_before = peak_rss_mb();

    // Baseline: the bytes through gzread, no parsing.
    std::size_t total = 0;
    const Timing read = timed([&] {
        gzFile f = gzopen(file.c_str(), "rb");
        gzbuffer(f, 1u << 18);
        std::vector<char> buffer(1u << 20);
        int got = 0;
        while ((got = gzread(f, buffer.data(), unsigned(buffer.size()))) > 0)
            total += std::size_t(got);
        gzclose(f);
    });
    if (total == 0)
        return 1;

    const fs::path dir = fs::temp_directory_path() / "fulcrum-bench-kineto";
    fs::remove_all(dir);
    fs::create_directories(dir / "scratch");
    auto importer = importer::make_kineto_importer();
    // The parser alone: both passes into a sink that only counts (no SQLite).
    MemorySink counting(0);
    Status parsed;
    const Timing parse =
        timed([&] { parsed = importer->read(importer::ImportInput{file}, counting, {}); });
    if (!parsed) {
        std::fprintf(stderr, "read failed: %s\n", parsed.error().message.c_str());
        return 1;
    }
    print_header();
    print_row("baseline: gzread, no parsing", read, size_mb, read);
    print_row("read (2 passes, no store)", parse, size_mb, read);
    if (parse_only)
        return 0;
    Status imported;
    const Timing import = timed([&] {
        imported =
            importer::import_file(*importer, file, (dir / "scratch" / "rank.sqlite").string());
    });
    if (!imported) {
        std::fprintf(stderr, "import failed: %s\n", imported.error().message.c_str());
        return 1;
    }
    const double rss_import = peak_rss_mb();

    importer::ImportOptions run_options;
    run_options.overwrite = true;
    Result<importer::ImportReport> run = importer::ImportReport{};
    const Timing whole = timed(
        [&] { run = importer::import_files({file}, (dir / "run.fulcrum").string(), run_options); });
    if (!run) {
        std::fprintf(stderr, "import_files failed: %s\n", run.error().message.c_str());
        return 1;
    }
    print_row("import_file (2 passes + writer)", import, size_mb, read);
    print_row("fulcrum import (rank file + merge)", whole, size_mb, read);
    std::printf(
        "file %.1f MB, %lld events; peak RSS %.1f MB before, %.1f MB after import_file, %.1f MB at "
        "end\n",
        size_mb, static_cast<long long>(run->events), rss_before, rss_import, peak_rss_mb());
    fs::remove_all(dir);
    return 0;
}
