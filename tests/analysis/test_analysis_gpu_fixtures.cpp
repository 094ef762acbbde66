// The analyses on real GPU captures (tests/data/README.md): fulcrum-train's CUDA backend on an
// NVIDIA H200 under `fulcrum capture`, CUPTI's kernels, copies, memsets, syncs and runtime API
// records beside the engine's NVTX ranges.
//
//   gpu-pp2cp2-offload-fixed / -wlb  4 ranks, dp1 pp2 cp2 tp1, 1F1B, 4 micro-batches, 3 steps,
//                                    FPDT-style chunked attention that offloads Q/K/V to
//                                    pinned host memory on the `offload` stream and fetches it
//                                    back on `prefetch`; fixed and WLB-LLM packing
//   gpu-profile-125m                 1 rank, the ~125M-parameter model, 2 micro-batches, 3 steps
//   gpu-torch-train                  not ours: a plain PyTorch loop (tests/data/torch/
//                                    cuda_train.py), 4 steps of 2 micro-batches, hand-made
//                                    NVTX ranges, pinned batches uploaded
//
// The files are fixed, so nothing here is timing noise; still, the checks are what must hold
// on any GPU capture, each figure recomputed here from the raw events (kernels, copies) and
// compared with what the analysis reports, rather than the printed numbers pasted in.
#include <QTest>
#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/analysis/run_analysis.h"
#include "core/store/trace_reader.h"

using namespace fulcrum;
using namespace fulcrum::analysis;

namespace {

constexpr int kSteps = 3;
constexpr int kOffloadMicrobatches = 4;
constexpr int kProfileMicrobatches = 2;
constexpr int kTorchSteps = 4;
constexpr int kTorchMicrobatches = 2;

std::string fixture(const char* name) {
    return std::string(FULCRUM_SOURCE_DIR "/tests/data/") + name;
}

RunTrace load(const char* name) {
    auto reader = store::TraceReader::open(fixture(name));
    if (!reader) {
        qFatal("cannot open %s: %s", name, reader.error().message.c_str());
    }
    auto trace = load_run_trace(*reader);
    if (!trace) {
        qFatal("cannot load %s: %s", name, trace.error().message.c_str());
    }
    return std::move(*trace);
}

RunAnalysis analyse(const RunTrace& trace) {
    auto analysis = analyze_run(trace);
    if (!analysis) {
        qFatal("cannot analyse: %s", analysis.error().message.c_str());
    }
    return std::move(*analysis);
}

// Intervals as plain pairs, united here by sorting (not through the analyses' IntervalSet).
using Spans = std::vector<std::pair<std::int64_t, std::int64_t>>;

Spans united(Spans spans) {
    std::sort(spans.begin(), spans.end());
    Spans out;
    for (const auto& [start, end] : spans) {
        if (end <= start) {
            continue;
        }
        if (!out.empty() && start <= out.back().second) {
            out.back().second = std::max(out.back().second, end);
        } else {
            out.push_back({start, end});
        }
    }
    return out;
}

std::int64_t length(const Spans& spans) {
    std::int64_t total = 0;
    for (const auto& [start, end] : united(spans)) {
        total += end - start;
    }
    return total;
}

std::int64_t overlap(const Spans& a, const Spans& b) {
    const Spans x = united(a), y = united(b);
    std::int64_t total = 0;
    std::size_t j = 0;
    for (const auto& [start, end] : x) {
        while (j < y.size() && y[j].second <= start) {
            ++j;
        }
        for (std::size_t k = j; k < y.size() && y[k].first < end; ++k) {
            total += std::min(end, y[k].second) - std::max(start, y[k].first);
        }
    }
    return total;
}

bool is_device_work(const Event& event) {
    return event.kind == EventKind::kernel || event.kind == EventKind::memcpy ||
           event.kind == EventKind::memset || event.kind == EventKind::collective;
}

bool is_host_device_copy(const Event& event) {
    return event.kind == EventKind::memcpy && (event.copy_kind == CopyKind::host_to_device ||
                                               event.copy_kind == CopyKind::device_to_host);
}

// The host side of a host↔device copy (CUPTI records both memories).
MemoryKind host_memory(const Event& event) {
    return event.copy_kind == CopyKind::host_to_device ? event.src_memory : event.dst_memory;
}

const LaneTrace* lane_named(const RankTrace& rank, std::string_view name) {
    for (const LaneTrace& lane : rank.lanes) {
        if (lane.info.name == name) {
            return &lane;
        }
    }
    return nullptr;
}

// Per name over every GPU stream of every rank: what the top-kernels table should hold.
struct NameTotals {
    std::int64_t count = 0, total_ns = 0, min_ns = INT64_MAX, max_ns = 0;
    std::set<std::int32_t> ranks;
};

std::map<std::string, NameTotals> device_work_by_name(const RunTrace& trace) {
    std::map<std::string, NameTotals> by_name;
    for (const RankTrace& rank : trace.ranks) {
        for (const LaneTrace& lane : rank.lanes) {
            if (lane.info.kind != LaneKind::gpu_stream) {
                continue;
            }
            for (const Event& event : lane.events) {
                if (!is_device_work(event)) {
                    continue;
                }
                NameTotals& t = by_name[std::string(trace.name(event.name))];
                ++t.count;
                t.total_ns += event.duration_ns();
                t.min_ns = std::min(t.min_ns, event.duration_ns());
                t.max_ns = std::max(t.max_ns, event.duration_ns());
                t.ranks.insert(rank.info.rank);
            }
        }
    }
    return by_name;
}

QString describe(const Pass& pass) {
    return QString("rank %1 step %2 mb %3 phase %4")
        .arg(pass.rank)
        .arg(pass.step)
        .arg(pass.microbatch)
        .arg(int(pass.phase));
}

}  // namespace

class GpuFixturesTest : public QObject {
    Q_OBJECT

    RunTrace fixed_, wlb_, profile_, torch_;
    RunAnalysis fixed_analysis_, wlb_analysis_, profile_analysis_, torch_analysis_;

    // Every check on the pp2 × cp2 captures holds for both balancers.
    void offload_runs_data() {
        QTest::addColumn<int>("which");
        QTest::newRow("fixed") << 0;
        QTest::newRow("wlb") << 1;
    }
    const RunTrace& offload_trace(int which) const { return which == 0 ? fixed_ : wlb_; }
    const RunAnalysis& offload_analysis(int which) const {
        return which == 0 ? fixed_analysis_ : wlb_analysis_;
    }

private slots:
    // analyze_run_file reads a rank at a time (issue 37) and must say exactly what the run
    // held whole says: every figure of the JSON, on each capture.
    void fileReadARankAtATimeEqualsTheRunInMemory_data() {
        QTest::addColumn<QString>("name");
        QTest::newRow("pp2 cp2 offload fixed") << "gpu-pp2cp2-offload-fixed.fulcrum";
        QTest::newRow("pp2 cp2 offload wlb") << "gpu-pp2cp2-offload-wlb.fulcrum";
        QTest::newRow("125m profile") << "gpu-profile-125m.fulcrum";
        QTest::newRow("pytorch loop") << "gpu-torch-train.fulcrum";
    }
    void fileReadARankAtATimeEqualsTheRunInMemory() {
        QFETCH(QString, name);
        const std::string path = fixture(qPrintable(name));
        const std::string held = analysis_json(analyse(load(qPrintable(name))));
        auto reader = store::TraceReader::open(path);
        QVERIFY(reader.ok());
        RunTrace metadata;
        auto streamed = analyze_run_file(*reader, metadata);
        QVERIFY2(streamed.ok(), streamed.ok() ? "" : streamed.error().message.c_str());
        QCOMPARE(analysis_json(*streamed), held);
        QVERIFY(streamed->events > 0);
        QCOMPARE(metadata.event_count(), std::int64_t{0});  // its events were never kept
        QCOMPARE(metadata.ranks.size(), reader->ranks().size());
        // The JSON is written a piece at a time (its largest arrays an element at a time):
        // it must be what one tree dumped whole would be, byte for byte.
        QCOMPARE(nlohmann::ordered_json::parse(held).dump() + "\n", held);
        if (name.contains("cp2")) {  // CP groups, written one at a time, are there
            QVERIFY(held.find("\"groups\":[{\"step\"") != std::string::npos);
        }
    }

    void initTestCase() {
        fixed_ = load("gpu-pp2cp2-offload-fixed.fulcrum");
        wlb_ = load("gpu-pp2cp2-offload-wlb.fulcrum");
        profile_ = load("gpu-profile-125m.fulcrum");
        torch_ = load("gpu-torch-train.fulcrum");
        fixed_analysis_ = analyse(fixed_);
        wlb_analysis_ = analyse(wlb_);
        profile_analysis_ = analyse(profile_);
        torch_analysis_ = analyse(torch_);
    }

    // `fulcrum capture` of a program that is not fulcrum-train: PyTorch's own kernels (ATen's,
    // cuDNN's fused attention, cuBLAS's) on its streams, each launched by a runtime call the
    // collector correlates, the backward's from the autograd engine's thread; the user's
    // hand-made NVTX ranges on the host, and the passes found from its `forward` and
    // `backward` ranges.
    void foreignPyTorchLoopIsTraced() {
        QCOMPARE(torch_.ranks.size(), std::size_t{1});
        const RankTrace& rank = torch_.ranks.front();
        QVERIFY(rank.info.complete);
        // One process that no launcher placed: the grid of one rank (MergeOptions::lone_process).
        QVERIFY(torch_.config.grid_known);
        QCOMPARE(torch_.config.layout.grid.world(), 1);
        QCOMPARE(rank.info.dropped_records, 0);
        std::map<std::string, int> ranges;
        std::set<std::int64_t> launches;
        std::vector<const Event*> kernels;
        int host_threads = 0;
        for (const LaneTrace& lane : rank.lanes) {
            host_threads += lane.info.kind == LaneKind::host_thread ? 1 : 0;
            for (const Event& event : lane.events) {
                if (event.kind == EventKind::range) {
                    std::string name(torch_.name(event.name));
                    ++ranges[name.substr(0, name.find(' '))];
                } else if (event.kind == EventKind::api && event.correlation >= 0) {
                    launches.insert(event.correlation);
                } else if (event.kind == EventKind::kernel) {
                    QCOMPARE(lane.info.kind, LaneKind::gpu_stream);
                    kernels.push_back(&event);
                }
            }
        }
        QCOMPARE(ranges["train_step"], kTorchSteps);
        QCOMPARE(ranges["microbatch"], kTorchSteps * kTorchMicrobatches);
        QCOMPARE(ranges["forward"], kTorchSteps * kTorchMicrobatches);
        QCOMPARE(ranges["backward"], kTorchSteps * kTorchMicrobatches);
        QCOMPARE(ranges["optimizer.step"], kTorchSteps);
        QVERIFY(host_threads >= 2);  // the loop's thread and the autograd engine's
        QVERIFY(kernels.size() > 1000);
        int aten = 0, attention = 0;
        for (const Event* kernel : kernels) {
            QVERIFY(launches.count(kernel->correlation) == 1);
            const std::string_view name = torch_.name(kernel->name);
            aten += name.find("at::native") != std::string_view::npos ? 1 : 0;
            attention += name.find("sdpa") != std::string_view::npos ? 1 : 0;
        }
        QVERIFY(aten > 0);
        // cuDNN's fused attention: forward and backward, 4 layers, each micro-batch.
        QCOMPARE(attention, 2 * 4 * kTorchSteps * kTorchMicrobatches);
        const auto passes = find_passes(torch_);
        QCOMPARE(torch_analysis_.passes, std::int64_t(passes.size()));
        QCOMPARE(passes.size(), std::size_t{2 * kTorchSteps * kTorchMicrobatches});
        std::map<int, int> passes_by_step;
        for (const Pass& pass : passes) {
            QVERIFY(pass.compute_ns > 0 && pass.compute_ns <= pass.wall_ns());
            ++passes_by_step[pass.step];
        }
        // Each backward is timed by the kernels PyTorch's autograd thread launched while the
        // loop's thread waited in its `backward` range: cuDNN's attention backward of each
        // layer lies inside a backward pass, its forward inside a forward pass.
        std::map<Phase, int> attention_inside;
        for (const Event* kernel : kernels) {
            const std::string_view name = torch_.name(kernel->name);
            if (name.find("sdpa") == std::string_view::npos) {
                continue;
            }
            const Phase phase =
                name.find("bprop") != std::string_view::npos ? Phase::backward : Phase::forward;
            for (const Pass& pass : passes) {
                if (kernel->start_ns >= pass.start_ns && kernel->end_ns <= pass.end_ns) {
                    QCOMPARE(pass.phase, phase);
                    ++attention_inside[phase];
                }
            }
        }
        QCOMPARE(attention_inside[Phase::forward], 4 * kTorchSteps * kTorchMicrobatches);
        QCOMPARE(attention_inside[Phase::backward], 4 * kTorchSteps * kTorchMicrobatches);
        // Its "train_step N" ranges are its steps: the breakdown a window each, N = 0..3, and
        // each pass in the step around it.
        for (int step = 0; step < kTorchSteps; ++step) {
            QCOMPARE(passes_by_step[step], 2 * kTorchMicrobatches);
        }
        const auto& breakdown = torch_analysis_.breakdown;
        QCOMPARE(breakdown.size(), std::size_t{kTorchSteps});
        for (int step = 0; step < kTorchSteps; ++step) {
            QCOMPARE(breakdown[step].step, step);
            QVERIFY(!breakdown[step].whole_trace);
            QVERIFY(breakdown[step].compute_ns > 0);
        }
    }

    // Its batches go up from pinned memory, and only its losses come down to pinned memory
    // (`.item()`, a few bytes each): neither is offload (a data loader's pinned batches once
    // read as offload here).
    void uploadsAreNotOffload() {
        const OffloadAnalysis& offload = torch_analysis_.offload;
        QVERIFY(offload.ranks.empty());
        QCOMPARE(offload.copy_ns, std::int64_t{0});
        std::int64_t uploads = 0, read_backs = 0, staging_ns = 0, pageable = 0;
        for (const LaneTrace& lane : torch_.ranks.front().lanes) {
            for (const Event& event : lane.events) {
                if (!is_host_device_copy(event)) {
                    continue;
                }
                if (host_memory(event) == MemoryKind::pageable) {
                    ++pageable;
                    continue;
                }
                if (event.copy_kind == CopyKind::host_to_device) {
                    ++uploads;
                } else {
                    QVERIFY(event.bytes >= 0 && event.bytes < 4096);
                    ++read_backs;
                }
                staging_ns += event.duration_ns();
            }
        }
        QCOMPARE(uploads, std::int64_t{kTorchSteps * kTorchMicrobatches});  // a batch each
        QCOMPARE(read_backs, std::int64_t{kTorchSteps});                    // a loss a step
        QCOMPARE(offload.staging_copies, uploads + read_backs);
        QCOMPARE(offload.staging_copy_ns, staging_ns);
        QCOMPARE(offload.pageable_copies, pageable);
        QVERIFY(offload.chunk_note.find("uploads and small read-backs") != std::string::npos);
        // The offload runs send to the host first: their uploads are their prefetches.
        QCOMPARE(fixed_analysis_.offload.staging_copies, std::int64_t{0});
        QVERIFY(!fixed_analysis_.offload.ranks.empty());
    }

    // The grid the engine wrote is read back, each rank at its coordinates, with its host
    // thread and the named CUDA streams as lanes.
    void gridAndLanesAreReadBack_data() { offload_runs_data(); }
    void gridAndLanesAreReadBack() {
        QFETCH(int, which);
        const RunTrace& trace = offload_trace(which);
        QCOMPARE(trace.config.layout.grid.dp, 1);
        QCOMPARE(trace.config.layout.grid.pp, 2);
        QCOMPARE(trace.config.layout.grid.cp, 2);
        QCOMPARE(trace.config.layout.grid.tp, 1);
        QCOMPARE(trace.config.layout.microbatches, kOffloadMicrobatches);
        QCOMPARE(schedule_text(trace.config), std::string("1f1b"));
        QCOMPARE(trace.config.balancer, std::string(which == 0 ? "fixed" : "wlb"));
        QCOMPARE(trace.ranks.size(), std::size_t{4});
        for (const RankTrace& rank : trace.ranks) {
            // Rank numbering puts CP innermost: rank = pp·cp + cp_rank (core/parallel/grid.h).
            QCOMPARE(rank.info.dp, 0);
            QCOMPARE(rank.info.tp, 0);
            QCOMPARE(rank.info.pp, rank.info.rank / 2);
            QCOMPARE(rank.info.cp, rank.info.rank % 2);
            QCOMPARE(rank.info.device, 0);  // four ranks shared the one H200
            QVERIFY(rank.info.complete);
            QCOMPARE(rank.info.dropped_records, 0);
            QVERIFY(rank.has_device_lanes());
            const LaneTrace* main = lane_named(rank, "main");
            QVERIFY(main != nullptr);
            QCOMPARE(main->info.kind, LaneKind::host_thread);
            for (const char* stream : {"compute", "offload", "prefetch"}) {
                const LaneTrace* lane = lane_named(rank, stream);
                QVERIFY2(lane != nullptr, stream);
                QCOMPARE(lane->info.kind, LaneKind::gpu_stream);
                QVERIFY(!lane->events.empty());
            }
        }
    }

    void profileGridAndModel() {
        QCOMPARE(profile_.ranks.size(), std::size_t{1});
        QCOMPARE(profile_.config.layout.grid.dp * profile_.config.layout.grid.pp *
                     profile_.config.layout.grid.cp * profile_.config.layout.grid.tp,
                 1);
        QCOMPARE(profile_.config.model.layers, 12);
        QCOMPARE(profile_.config.model.hidden, 768);
        QCOMPARE(profile_.config.layout.microbatches, kProfileMicrobatches);
        // fp32 (no --dtype): cuBLAS ran its GEMMs as TF32 (sm90_xmma_gemm_f32f32_tf32f32_*).
        QCOMPARE(profile_.config.dtype, std::string("fp32"));
        const RankTrace& rank = profile_.ranks[0];
        QVERIFY(rank.has_device_lanes());
        QVERIFY(lane_named(rank, "compute") != nullptr);
        // No chunked attention in this run: no offload or prefetch stream.
        QVERIFY(lane_named(rank, "offload") == nullptr);
        QVERIFY(lane_named(rank, "prefetch") == nullptr);
        QCOMPARE(profile_analysis_.passes, std::int64_t{kSteps * kProfileMicrobatches * 2});
    }

    // CUPTI's copies land on the stream that ran them with their direction: the offload
    // stream only writes to the host, prefetch only reads from it, and every kernel runs on
    // the compute stream.
    void copiesAreOnTheirStreams_data() { offload_runs_data(); }
    void copiesAreOnTheirStreams() {
        QFETCH(int, which);
        const RunTrace& trace = offload_trace(which);
        for (const RankTrace& rank : trace.ranks) {
            std::map<std::string, std::map<CopyKind, int>> copies;
            std::map<std::string, int> kernels;
            for (const LaneTrace& lane : rank.lanes) {
                for (const Event& event : lane.events) {
                    if (event.kind == EventKind::memcpy) {
                        ++copies[lane.info.name][event.copy_kind];
                        QVERIFY(event.bytes > 0);
                    } else if (event.kind == EventKind::kernel) {
                        ++kernels[lane.info.name];
                    }
                }
            }
            QCOMPARE(copies["offload"].size(), std::size_t{1});
            QVERIFY(copies["offload"][CopyKind::device_to_host] > 0);
            QCOMPARE(copies["prefetch"].size(), std::size_t{1});
            QVERIFY(copies["prefetch"][CopyKind::host_to_device] > 0);
            QCOMPARE(kernels.size(), std::size_t{1});
            QVERIFY(kernels["compute"] > 0);
        }
    }

    // Offload overlap, recomputed per rank from the copies themselves: the union of host↔device
    // copies, its overlap with the kernels (the compute of a GPU rank), the time by direction
    // and bytes over summed durations.
    void offloadOverlapMatchesTheCopies_data() { offload_runs_data(); }
    void offloadOverlapMatchesTheCopies() {
        QFETCH(int, which);
        const RunTrace& trace = offload_trace(which);
        const OffloadAnalysis& offload = offload_analysis(which).offload;
        QCOMPARE(offload.ranks.size(), trace.ranks.size());
        std::int64_t copy_total = 0, bytes_total = 0, timed_total = 0;
        std::int64_t pageable_count = 0, pageable_ns = 0;
        for (const RankOffload& row : offload.ranks) {
            const RankTrace* rank = trace.find_rank(row.rank);
            QVERIFY(rank != nullptr);
            Spans copies, side_copies, kernels;
            std::int64_t count = 0, to_device = 0, to_host = 0, bytes = 0, timed = 0;
            for (const LaneTrace& lane : rank->lanes) {
                for (const Event& event : lane.events) {
                    if (event.kind == EventKind::kernel) {
                        kernels.push_back({event.start_ns, event.end_ns});
                    }
                    if (!is_host_device_copy(event)) {
                        continue;
                    }
                    // Pageable copies (the staged communicator, uploads, read-backs, all on
                    // the compute stream) are counted apart; FPDT's are pinned.
                    if (host_memory(event) == MemoryKind::pageable) {
                        QCOMPARE(lane.info.name, std::string("compute"));
                        ++pageable_count;
                        pageable_ns += event.duration_ns();
                        continue;
                    }
                    QCOMPARE(host_memory(event), MemoryKind::pinned);
                    ++count;
                    copies.push_back({event.start_ns, event.end_ns});
                    if (lane.info.name != "compute") {
                        side_copies.push_back({event.start_ns, event.end_ns});
                    }
                    (event.copy_kind == CopyKind::host_to_device ? to_device : to_host) +=
                        event.duration_ns();
                    bytes += event.bytes;
                    timed += event.duration_ns();
                }
            }
            QCOMPARE(row.copies, count);
            QCOMPARE(row.copy_ns, length(copies));
            QCOMPARE(row.host_to_device_ns, to_device);
            QCOMPARE(row.device_to_host_ns, to_host);
            QCOMPARE(row.bytes, bytes);
            QVERIFY(row.bandwidth_gb_s.has_value());
            QCOMPARE(*row.bandwidth_gb_s, double(bytes) / double(timed));
            QCOMPARE(row.overlapped_ns, overlap(copies, kernels));
            QCOMPARE(row.overlapped_ns + row.exposed_ns, row.copy_ns);
            // Some of the copying hid behind the kernels, not all of it.
            QVERIFY(row.overlapped_ns > 0);
            QVERIFY(row.exposed_ns > 0);
            // A copy on the compute stream waits for the kernels before it on that stream, so
            // only the offload and prefetch streams' copies can hide.
            QCOMPARE(length(side_copies), row.copy_ns);
            QVERIFY(overlap(side_copies, kernels) == row.overlapped_ns);
            copy_total += row.copy_ns;
            bytes_total += bytes;
            timed_total += timed;
        }
        QCOMPARE(offload.copy_ns, copy_total);
        QVERIFY(pageable_count > 0);
        QCOMPARE(offload.pageable_copies, pageable_count);
        QCOMPARE(offload.pageable_copy_ns, pageable_ns);
        QCOMPARE(offload.overlapped_ns + offload.exposed_ns, offload.copy_ns);
        const double hidden = double(offload.overlapped_ns) / double(offload.copy_ns);
        QVERIFY2(hidden > 0 && hidden < 1, qPrintable(QString::number(hidden)));
        QVERIFY(offload.bandwidth_gb_s.has_value());
        QCOMPARE(*offload.bandwidth_gb_s, double(bytes_total) / double(timed_total));
    }

    // The 125M run has no offload: its copies (weights up, losses down) are all pageable.
    void profileHasNoOffload() {
        const OffloadAnalysis& offload = profile_analysis_.offload;
        QVERIFY(offload.ranks.empty());
        QCOMPARE(offload.copy_ns, std::int64_t{0});
        std::int64_t copies = 0;
        for (const RankTrace& rank : profile_.ranks) {
            for (const LaneTrace& lane : rank.lanes) {
                for (const Event& event : lane.events) {
                    copies += is_host_device_copy(event) ? 1 : 0;
                }
            }
        }
        QVERIFY(copies > 0);
        QCOMPARE(offload.pageable_copies, copies);
        QVERIFY(!offload.min_hidden_chunk_tokens.has_value());
        QVERIFY(offload.chunk_note.find("pageable") != std::string::npos);
    }

    // Kernel time by type is the union of each rank's device work, split by type; the idle
    // time is its span less that union.
    void kernelTimeByTypeIsTheUnionOfDeviceWork_data() {
        QTest::addColumn<int>("which");
        QTest::newRow("fixed") << 0;
        QTest::newRow("wlb") << 1;
        QTest::newRow("125m") << 2;
    }
    void kernelTimeByTypeIsTheUnionOfDeviceWork() {
        QFETCH(int, which);
        const RunTrace& trace = which == 2 ? profile_ : offload_trace(which);
        const RunAnalysis& analysis = which == 2 ? profile_analysis_ : offload_analysis(which);
        QVERIFY(analysis.has_device_activity);
        QCOMPARE(analysis.kernels.time_by_type.size(), trace.ranks.size());
        for (const KernelTimeByType& row : analysis.kernels.time_by_type) {
            const RankTrace* rank = trace.find_rank(row.rank);
            QVERIFY(rank != nullptr);
            Spans all, computation, memory;
            for (const LaneTrace& lane : rank->lanes) {
                if (lane.info.kind != LaneKind::gpu_stream) {
                    continue;
                }
                for (const Event& event : lane.events) {
                    if (!is_device_work(event)) {
                        continue;
                    }
                    all.push_back({event.start_ns, event.end_ns});
                    if (event.kind == EventKind::kernel) {
                        computation.push_back({event.start_ns, event.end_ns});
                    } else if (event.kind != EventKind::collective) {
                        memory.push_back({event.start_ns, event.end_ns});
                    }
                }
            }
            const Spans merged = united(all);
            QCOMPARE(row.busy_ns(), length(all));
            QCOMPARE(row.kernel_span_ns, merged.back().second - merged.front().first);
            QCOMPARE(row.idle_ns, row.kernel_span_ns - row.busy_ns());
            // Bits: 1 computation, 2 communication, 4 memory.
            QCOMPARE(row.ns[1] + row.ns[3] + row.ns[5] + row.ns[7], length(computation));
            QCOMPARE(row.ns[4] + row.ns[5] + row.ns[6] + row.ns[7], length(memory));
            // The staged communicator moves data through host copies, not NCCL kernels.
            QCOMPARE(row.ns[2] + row.ns[3] + row.ns[6] + row.ns[7], 0);
            QVERIFY(row.ns[1] > 0);
        }
        // Every stream's kernel count is the device work on its lane.
        for (const StreamIdle& idle : analysis.kernels.idle) {
            const LaneTrace* lane = lane_named(*trace.find_rank(idle.rank), idle.lane);
            QVERIFY(lane != nullptr);
            QCOMPARE(idle.kernels, std::int64_t(std::count_if(lane->events.begin(),
                                                              lane->events.end(), is_device_work)));
        }
    }

    // Top kernels: each row is its name's count, total, min, max and ranks over the device
    // work, the rows by total time, and no name left out that ran longer than the last row.
    void topKernelsAreTheLongestNames_data() { kernelTimeByTypeIsTheUnionOfDeviceWork_data(); }
    void topKernelsAreTheLongestNames() {
        QFETCH(int, which);
        const RunTrace& trace = which == 2 ? profile_ : offload_trace(which);
        const auto& top =
            (which == 2 ? profile_analysis_ : offload_analysis(which)).kernels.top_kernels;
        const auto by_name = device_work_by_name(trace);
        QCOMPARE(top.size(), std::min(by_name.size(), std::size_t{20}));
        for (std::size_t i = 0; i < top.size(); ++i) {
            const KernelStats& stats = top[i];
            const auto found = by_name.find(stats.name);
            QVERIFY2(found != by_name.end(), stats.name.c_str());
            const NameTotals& expected = found->second;
            QCOMPARE(stats.count, expected.count);
            QCOMPARE(stats.total_ns, expected.total_ns);
            QCOMPARE(stats.min_ns, expected.min_ns);
            QCOMPARE(stats.max_ns, expected.max_ns);
            QCOMPARE(stats.ranks, int(expected.ranks.size()));
            QVERIFY(stats.rank_total_min_ns <= stats.rank_total_max_ns);
            QVERIFY(stats.rank_total_max_ns <= stats.total_ns);
            if (i > 0) {
                QVERIFY(top[i - 1].total_ns >= stats.total_ns);
            }
        }
        for (const auto& [name, totals] : by_name) {
            const bool listed = std::any_of(top.begin(), top.end(),
                                            [&](const KernelStats& s) { return s.name == name; });
            QVERIFY2(listed || totals.total_ns <= top.back().total_ns, name.c_str());
        }
    }

    // The 125M model's profile: its three attention kernels lead, and together take most of
    // the computation kernels' time; cuBLAS's Hopper (sm90) GEMMs follow.
    void attentionKernelsLeadTheProfile() {
        const auto& top = profile_analysis_.kernels.top_kernels;
        QVERIFY(top.size() >= 4);
        const char* expected[] = {"attention_backward_dkdv_kernel", "attention_backward_dq_kernel",
                                  "attention_forward_kernel"};
        std::int64_t attention_ns = 0;
        for (int i = 0; i < 3; ++i) {
            QVERIFY2(top[i].name.find(expected[i]) != std::string::npos, top[i].name.c_str());
            QCOMPARE(top[i].type, KernelType::computation);
            QCOMPARE(top[i].count,
                     std::int64_t{kSteps * kProfileMicrobatches * 12});  // a layer each
            attention_ns += top[i].total_ns;
        }
        std::int64_t computation_ns = 0;
        for (const auto& [name, totals] : device_work_by_name(profile_)) {
            if (name.rfind("Memcpy", 0) != 0 && name != "Memset") {
                computation_ns += totals.total_ns;
            }
        }
        QVERIFY2(
            2 * attention_ns > computation_ns,
            qPrintable(QString("attention %1 of %2 ns").arg(attention_ns).arg(computation_ns)));
        QVERIFY(std::any_of(top.begin(), top.end(), [](const KernelStats& s) {
            return s.name.rfind("sm90_", 0) == 0 && s.type == KernelType::computation;
        }));
    }

    // GPU-true passes: every stage's forward and backward of every micro-batch in every step,
    // each timed by the device work it launched, so it starts and ends with a device event of
    // its rank and never before the host range that launched it.
    void passesAreFoundOnTheDevice_data() { offload_runs_data(); }
    void passesAreFoundOnTheDevice() {
        QFETCH(int, which);
        const RunTrace& trace = offload_trace(which);
        const auto passes = find_passes(trace);
        QCOMPARE(offload_analysis(which).passes, std::int64_t(passes.size()));
        QCOMPARE(passes.size(), std::size_t{4 * kSteps * kOffloadMicrobatches * 2});
        std::set<std::tuple<int, int, int, int>> seen;
        for (const Pass& pass : passes) {
            const RankTrace* rank = trace.find_rank(pass.rank);
            QCOMPARE(int(pass.stage), rank->info.pp);
            QVERIFY(pass.step >= 0 && pass.step < kSteps);
            QVERIFY(pass.microbatch >= 0 && pass.microbatch < kOffloadMicrobatches);
            QVERIFY(seen.insert({pass.rank, pass.step, pass.microbatch, int(pass.phase)}).second);
            std::set<std::int64_t> starts, ends;
            for (const LaneTrace& lane : rank->lanes) {
                if (lane.info.kind != LaneKind::gpu_stream) {
                    continue;
                }
                for (const Event& event : lane.events) {
                    if (is_device_work(event)) {
                        starts.insert(event.start_ns);
                        ends.insert(event.end_ns);
                    }
                }
            }
            QVERIFY2(starts.count(pass.start_ns) == 1, qPrintable(describe(pass)));
            QVERIFY2(ends.count(pass.end_ns) == 1, qPrintable(describe(pass)));
            const LaneTrace* main = lane_named(*rank, "main");
            const Role role = pass.phase == Phase::forward ? Role::forward : Role::backward;
            const auto host =
                std::find_if(main->events.begin(), main->events.end(), [&](const Event& e) {
                    return trace.role(e) == role && e.step == pass.step &&
                           e.microbatch == pass.microbatch;
                });
            QVERIFY2(host != main->events.end(), qPrintable(describe(pass)));
            QVERIFY2(pass.start_ns >= host->start_ns, qPrintable(describe(pass)));
            QVERIFY(pass.compute_ns > 0 && pass.compute_ns <= pass.wall_ns());
            QVERIFY(pass.attention_ns > 0);
        }
    }

    // Pipeline bubbles of pp2 under 1F1B: two pipelines (one per CP rank) in each step, each
    // with both stages busy at the rank the grid puts there.
    void bubblesCoverEveryStageAndStep_data() { offload_runs_data(); }
    void bubblesCoverEveryStageAndStep() {
        QFETCH(int, which);
        const RunTrace& trace = offload_trace(which);
        const BubbleAnalysis& bubbles = offload_analysis(which).bubbles;
        QCOMPARE(bubbles.schedule, std::string("1f1b"));
        QVERIFY(bubbles.theory_fraction.has_value());
        QCOMPARE(*bubbles.theory_fraction, 1.0 / kOffloadMicrobatches);  // (p − 1) / m
        QCOMPARE(bubbles.pipelines.size(), std::size_t{kSteps * 2});
        QCOMPARE(bubbles.stages.size(), std::size_t{kSteps * 2 * 2});
        std::set<std::tuple<int, int, int>> seen;
        for (const StageBubble& stage : bubbles.stages) {
            QVERIFY(stage.rank.has_value());
            const RankTrace* rank = trace.find_rank(*stage.rank);
            QCOMPARE(rank->info.pp, stage.stage);
            QCOMPARE(rank->info.cp, stage.cp);
            QVERIFY(seen.insert({stage.step, stage.cp, stage.stage}).second);
            QVERIFY(stage.busy_ns > 0);
            QVERIFY(stage.busy_ns <= stage.window_ns);
            QCOMPARE(stage.bubble_ns, stage.window_ns - stage.busy_ns);
            QVERIFY(stage.bubble_fraction.has_value());
            QVERIFY(stage.warmup_cooldown_ns + stage.unequal_microbatch_ns + stage.other_ns <=
                    stage.bubble_ns + 1);
        }
    }

    // CP attention load: each (step, micro-batch, stage) pairs the two CP ranks, each with the
    // attention its passes measured and the pairs it held, and the imbalance is their max/mean.
    void cpLoadPairsTheCpRanks_data() { offload_runs_data(); }
    void cpLoadPairsTheCpRanks() {
        QFETCH(int, which);
        const RunTrace& trace = offload_trace(which);
        const CpLoadAnalysis& cp = offload_analysis(which).cp_load;
        QCOMPARE(cp.cp, std::optional<int>(2));
        QCOMPARE(cp.groups.size(), std::size_t{kSteps * kOffloadMicrobatches * 2});
        std::map<std::tuple<int, int, int>, std::int64_t> attention;  // (rank, step, mb)
        for (const Pass& pass : find_passes(trace)) {
            attention[{pass.rank, pass.step, pass.microbatch}] += pass.attention_ns;
        }
        for (const CpGroupLoad& group : cp.groups) {
            QCOMPARE(group.ranks.size(), std::size_t{2});
            double sum = 0, most = 0;
            for (int c = 0; c < 2; ++c) {
                const CpRankLoad& load = group.ranks[std::size_t(c)];
                QCOMPARE(load.cp_rank, c);
                QCOMPARE(trace.find_rank(load.rank)->info.cp, c);
                QCOMPARE(trace.find_rank(load.rank)->info.pp, group.pp);
                QVERIFY(load.attention_ns.has_value());
                QCOMPARE(*load.attention_ns,
                         (attention[{load.rank, group.step, group.microbatch}]));
                QVERIFY(load.pairs.has_value() && *load.pairs > 0);
                QVERIFY(load.tokens.has_value() && *load.tokens > 0);
                sum += double(*load.attention_ns);
                most = std::max(most, double(*load.attention_ns));
            }
            QVERIFY(group.measured_imbalance.has_value());
            QCOMPARE(*group.measured_imbalance, most / (sum / 2));
            QVERIFY(group.predicted_imbalance.has_value());
        }
    }

    // The critical path of each step tiles it: segments back to back from its start to its
    // end, which is no earlier than the step's last pass; its pass segments lie in real passes.
    void criticalPathTilesEachStep_data() { kernelTimeByTypeIsTheUnionOfDeviceWork_data(); }
    void criticalPathTilesEachStep() {
        QFETCH(int, which);
        const RunTrace& trace = which == 2 ? profile_ : offload_trace(which);
        const RunAnalysis& analysis = which == 2 ? profile_analysis_ : offload_analysis(which);
        const auto passes = find_passes(trace);
        QCOMPARE(analysis.critical_paths.size(), std::size_t{kSteps});
        for (const CriticalPath& path : analysis.critical_paths) {
            QVERIFY(!path.segments.empty());
            QCOMPARE(path.segments.front().start_ns, path.start_ns);
            QCOMPARE(path.segments.back().end_ns, path.end_ns);
            std::int64_t sum = 0;
            for (std::size_t i = 0; i < path.segments.size(); ++i) {
                const CriticalSegment& segment = path.segments[i];
                QVERIFY(segment.duration_ns() > 0);
                if (i > 0) {
                    QCOMPARE(segment.start_ns, path.segments[i - 1].end_ns);
                }
                sum += segment.duration_ns();
                if (!segment.is_pass()) {
                    continue;
                }
                const auto pass = std::find_if(passes.begin(), passes.end(), [&](const Pass& p) {
                    return p.rank == segment.rank && p.step == segment.step &&
                           p.microbatch == segment.microbatch && p.phase == segment.phase;
                });
                QVERIFY(pass != passes.end());
                QVERIFY2(segment.start_ns >= pass->start_ns && segment.end_ns <= pass->end_ns,
                         qPrintable(describe(*pass)));
            }
            QCOMPARE(sum, path.end_ns - path.start_ns);
            std::int64_t by_rank = 0;
            for (const auto& [rank, ns] : path.by_rank) {
                by_rank += ns;
            }
            QCOMPARE(by_rank, sum);
            for (const Pass& pass : passes) {
                if (pass.step == path.step) {
                    QVERIFY(pass.end_ns <= path.end_ns);
                    QVERIFY(pass.start_ns >= path.start_ns);
                }
            }
            QVERIFY(!path.what_if.empty());
        }
    }

    // Every rank's step breakdown adds up to the step's wall time.
    void breakdownAddsUp_data() { kernelTimeByTypeIsTheUnionOfDeviceWork_data(); }
    void breakdownAddsUp() {
        QFETCH(int, which);
        const RunTrace& trace = which == 2 ? profile_ : offload_trace(which);
        const RunAnalysis& analysis = which == 2 ? profile_analysis_ : offload_analysis(which);
        QCOMPARE(analysis.breakdown.size(), trace.ranks.size() * kSteps);
        for (const StepBreakdown& row : analysis.breakdown) {
            QCOMPARE(row.compute_ns + row.exposed_communication_ns + row.other_ns + row.idle_ns,
                     row.wall_ns());
            QVERIFY(row.compute_ns > 0);
        }
    }

    // Fixed against WLB-LLM: the same grid and engine, so every kernel of one ran in the other;
    // each row's per-step counts and times are the events' own, and the diff of a run with
    // itself is empty.
    void fixedAgainstWlbDiff() {
        QCOMPARE(fixed_analysis_.config.layout.grid.pp, wlb_analysis_.config.layout.grid.pp);
        QCOMPARE(fixed_analysis_.config.layout.grid.cp, wlb_analysis_.config.layout.grid.cp);
        QVERIFY(fixed_analysis_.config.balancer != wlb_analysis_.config.balancer);
        const RunDiff diff = diff_runs({&fixed_, std::nullopt}, {&wlb_, std::nullopt});
        QCOMPARE(diff.steps_a, kSteps);
        QCOMPARE(diff.steps_b, kSteps);
        QVERIFY(!diff.rows.empty());
        for (std::size_t i = 1; i < diff.rows.size(); ++i) {
            QVERIFY(std::abs(diff.rows[i - 1].delta_ns()) >= std::abs(diff.rows[i].delta_ns()));
        }
        auto per_step = [](const RunTrace& trace, std::string_view name, EventKind kind) {
            double count = 0, total = 0;
            for (const RankTrace& rank : trace.ranks) {
                for (const LaneTrace& lane : rank.lanes) {
                    for (const Event& event : lane.events) {
                        if (event.kind == kind && trace.name(event.name) == name) {
                            ++count;
                            total += double(event.duration_ns());
                        }
                    }
                }
            }
            return std::pair{count / kSteps, total / kSteps};
        };
        int kernels = 0;
        for (const NameDiff& row : diff.rows) {
            // The engine's own kernels run in both; cuBLAS may pick another GEMM kernel for
            // the other balancer's shapes (a name only one side has).
            if (row.kind == EventKind::kernel &&
                row.name.find("fulcrum::engine::cuda::") != std::string::npos) {
                ++kernels;
                QVERIFY2(!row.added() && !row.removed(), row.name.c_str());
            }
            if (row.kind != EventKind::kernel && row.name != "forward" && row.name != "backward") {
                continue;
            }
            const auto [count_a, total_a] = per_step(fixed_, row.name, row.kind);
            const auto [count_b, total_b] = per_step(wlb_, row.name, row.kind);
            QCOMPARE(row.count_a, count_a);
            QCOMPARE(row.count_b, count_b);
            QCOMPARE(row.total_ns_a, total_a);
            QCOMPARE(row.total_ns_b, total_b);
        }
        QVERIFY(kernels > 0);
        // Every rank runs a forward of each of its 4 micro-batches per step on both sides.
        const auto forward =
            std::find_if(diff.rows.begin(), diff.rows.end(),
                         [](const NameDiff& row) { return row.name == "forward"; });
        QVERIFY(forward != diff.rows.end());
        QCOMPARE(forward->count_a, 4.0 * kOffloadMicrobatches);
        QCOMPARE(forward->count_b, 4.0 * kOffloadMicrobatches);

        const RunDiff same = diff_runs({&fixed_, std::nullopt}, {&fixed_, std::nullopt});
        for (const NameDiff& row : same.rows) {
            QCOMPARE(row.delta_ns(), 0.0);
            QCOMPARE(row.count_a, row.count_b);
        }
        // One step against another of the same run.
        const RunDiff steps = diff_runs({&fixed_, 1}, {&fixed_, 2});
        QCOMPARE(steps.steps_a, 1);
        QCOMPARE(steps.steps_b, 1);
        QVERIFY(!steps.rows.empty());

        // The file read a rank at a time, both steps in one read (`fulcrum diff RUN --step-a 1
        // --step-b 2`), and the tally the analysis takes as it reads the ranks (a comparison
        // report, the GUI): the same rows as the run held whole.
        const auto same_rows = [](const RunDiff& got, const RunDiff& want) {
            QCOMPARE(got.steps_a, want.steps_a);
            QCOMPARE(got.rows.size(), want.rows.size());
            for (std::size_t i = 0; i < want.rows.size(); ++i) {
                QCOMPARE(got.rows[i].name, want.rows[i].name);
                QCOMPARE(got.rows[i].count_a, want.rows[i].count_a);
                QCOMPARE(got.rows[i].count_b, want.rows[i].count_b);
                QCOMPARE(got.rows[i].total_ns_a, want.rows[i].total_ns_a);
                QCOMPARE(got.rows[i].total_ns_b, want.rows[i].total_ns_b);
            }
        };
        auto reader = store::TraceReader::open(fixture("gpu-pp2cp2-offload-fixed.fulcrum"));
        QVERIFY(reader.ok());
        LoadOptions metadata;
        metadata.read_events = false;
        auto names = load_run_trace(*reader, metadata);
        QVERIFY(names.ok());
        auto tallied = tally_run_file(*reader, *names, {1, 2, std::nullopt});
        QVERIFY(tallied.ok());
        QCOMPARE(tallied->size(), std::size_t(3));
        same_rows(diff_tallies({&(*tallied)[0], &*names}, {&(*tallied)[1], &*names}), steps);
        AnalyzeOptions tally_names;
        tally_names.tally_names = true;
        auto analysed = analyze_run(wlb_, tally_names);
        QVERIFY(analysed.ok() && analysed->names);
        same_rows(diff_tallies({&(*tallied)[2], &*names}, {&*analysed->names, &wlb_}), diff);
    }
};

QTEST_GUILESS_MAIN(GpuFixturesTest)
#include "test_analysis_gpu_fixtures.moc"
