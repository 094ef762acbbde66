// Diff tests of the Kineto importer on small hand-made fixtures (tests/import/kineto/data).
#include <QTest>

#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/analysis/run_analysis.h"
#include "core/analysis/run_trace.h"
#include "core/import/importer.h"
#include "core/import/kineto/json_stream.h"
#include "core/store/merge.h"
#include "core/store/trace_reader.h"
#include "core/trace/memory_sink.h"
#include "tests/import/same_run.h"

using namespace fulcrum;
namespace fs = std::filesystem;

namespace {
const std::string kData = std::string(FULCRUM_SOURCE_DIR) + "/tests/import/kineto/data/";

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}
void spit(const std::string& path, std::string_view text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
}
void gzip_to(const std::string& path, std::string_view text) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    gzclose(f);
}

struct Found {
    const LaneInfo* lane = nullptr;
    Event event;
};
}  // namespace

class TestKinetoImport : public QObject {
    Q_OBJECT
    fs::path dir_;

    std::vector<Found> find(const store::TraceReader& reader, std::string_view name,
                            std::int32_t rank) {
        std::vector<Found> out;
        for (const LaneInfo& lane : reader.lanes_of_rank(rank)) {
            auto events = reader.events_in_window(lane.id, INT64_MIN / 4, INT64_MAX / 4);
            if (!events)
                continue;
            for (const Event& e : *events) {
                if (reader.string(e.name) == name)
                    out.push_back({reader.lane(lane.id), e});
            }
        }
        return out;
    }
    Found one(const store::TraceReader& reader, std::string_view name, std::int32_t rank) {
        auto all = find(reader, name, rank);
        if (all.size() != 1)
            qFatal("expected one '%s' on rank %d, found %zu", std::string(name).c_str(), rank,
                   all.size());
        return all.front();
    }

private slots:
    void initTestCase() {
        dir_ = fs::temp_directory_path() / ("fulcrum-kineto-test-" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void cleanupTestCase() { fs::remove_all(dir_); }

    void sniffs() {
        auto importer = importer::find_importer(kData + "rank0.json");
        QVERIFY(importer && *importer != nullptr);
        QCOMPARE(std::string((*importer)->name()), std::string("kineto-json"));
        spit((dir_ / "text.json").string(), "hello, this is not JSON\n");
        auto none = importer::find_importer((dir_ / "text.json").string());
        QVERIFY(none && *none == nullptr);
        auto result = importer::import_files({(dir_ / "text.json").string()},
                                             (dir_ / "text.fulcrum").string());
        QVERIFY(!result);
        QVERIFY(result.error().message.find("not a trace Fulcrum can import") != std::string::npos);
    }

    void two_ranks() {
        const std::string out = (dir_ / "two.fulcrum").string();
        auto result = importer::import_files({kData + "rank1.json", kData + "rank0.json"}, out);
        QVERIFY2(result, result ? "" : result.error().message.c_str());
        QCOMPARE(result->format, std::string("kineto-json"));
        QCOMPARE(result->ranks, 2);
        auto reader = store::TraceReader::open(out);
        QVERIFY(reader);
        QCOMPARE(reader->run().origin, RunOrigin::imported);
        QCOMPARE(reader->ranks().size(), std::size_t(2));
        QCOMPARE(reader->ranks()[0].rank, 0);  // from distributedInfo, not the input order
        QCOMPARE(reader->ranks()[1].rank, 1);
        QCOMPARE(reader->ranks()[0].device, 0);

        // Common time base: ts 1000 µs on rank 1 is 500 µs after ts 1000 µs on rank 0.
        const auto s0 = find(*reader, "step", 0), s1 = find(*reader, "step", 1);
        QCOMPARE(s0.size(), std::size_t(2));
        QCOMPARE(s1.size(), std::size_t(2));
        QCOMPARE(s1[0].event.start_ns - s0[0].event.start_ns, std::int64_t(500'000));
        QCOMPARE(s0[0].event.step, 0);
        QCOMPARE(s0[1].event.step, 1);
        QCOMPARE(s0[0].event.category, Category::schedule);
        QCOMPARE(s0[0].event.end_ns - s0[0].event.start_ns, std::int64_t(1'000'000));

        for (int rank : {0, 1}) {
            const Found mm = one(*reader, "aten::mm", rank);
            QCOMPARE(mm.event.step, 0);
            QCOMPARE(mm.event.end_ns - mm.event.start_ns,
                     std::int64_t(100'500));  // 100.5 µs exactly
            QCOMPARE(mm.lane->name,
                     std::string("thread ") + (rank == 0 ? "100" : "200") + " (python)");
            QCOMPARE(mm.lane->kind, LaneKind::host_thread);

            const Found gemm = one(*reader, "sm90_xmma_gemm_bf16", rank);
            QCOMPARE(gemm.event.kind, EventKind::kernel);
            QCOMPARE(gemm.event.category, Category::compute);
            QCOMPARE(gemm.event.correlation, std::int64_t(11));
            QCOMPARE(gemm.event.step, 0);
            QCOMPARE(gemm.lane->kind, LaneKind::gpu_stream);
            QCOMPARE(gemm.lane->name, std::string("stream 7 (device 0)"));
            // Its launch has the same correlation id.
            bool launched = false;
            for (const Found& launch : find(*reader, "cudaLaunchKernel", rank)) {
                if (launch.event.correlation == 11) {
                    launched = true;
                    QCOMPARE(launch.event.kind, EventKind::api);
                    QCOMPARE(launch.event.category, Category::runtime);
                    QVERIFY(launch.event.start_ns < gemm.event.start_ns);
                }
            }
            QVERIFY(launched);

            const Found nccl = one(
                *reader,
                "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", rank);
            QCOMPARE(nccl.event.kind, EventKind::collective);
            QCOMPARE(nccl.event.category, Category::communication);
            // Launched in step 0 (ts 1900), runs into step 1's window: the launch decides.
            QCOMPARE(nccl.event.step, 0);
            QVERIFY(reader->string(nccl.event.args).find("allreduce") != std::string_view::npos);

            const Found flash = one(*reader, "flash_fwd_kernel", rank);
            QCOMPARE(flash.event.category, Category::attention);
            QCOMPARE(flash.event.step, 1);

            const Found copy = one(*reader, "Memcpy HtoD (Pageable -> Device)", rank);
            QCOMPARE(copy.event.kind, EventKind::memcpy);
            QCOMPARE(copy.event.bytes, std::int64_t(1048576));
            QCOMPARE(copy.event.copy_kind, CopyKind::host_to_device);
            QCOMPARE(copy.event.category, Category::offload);
            QCOMPARE(copy.lane->name, std::string("stream 20 (device 0)"));
        }

        // Nesting: on the host lane, the step comes before the ops that start inside it.
        const Found step0 = s0[0];
        auto host = reader->events_in_window(step0.lane->id, INT64_MIN / 4, INT64_MAX / 4);
        QVERIFY(host);
        QCOMPARE(reader->string(host->front().name), std::string_view("step"));
        QCOMPARE(reader->string((*host)[1].name), std::string_view("aten::linear"));
        QCOMPARE(reader->string((*host)[2].name), std::string_view("aten::mm"));

        // Analyses run; what cannot be derived is said, not shown as zero.
        auto trace = analysis::load_run_trace(*reader);
        QVERIFY(trace);
        auto analysis = analysis::analyze_run(*trace);
        QVERIFY2(analysis, analysis ? "" : analysis.error().message.c_str());
        QCOMPARE(analysis->breakdown.size(), std::size_t(4));
        for (const auto& row : analysis->breakdown) {
            QVERIFY(row.wall_ns() == 1'000'000);
            QVERIFY(row.compute_ns > 0);
            QCOMPARE(row.compute_ns + row.exposed_communication_ns + row.other_ns + row.idle_ns,
                     row.wall_ns());
        }
        QCOMPARE(analysis->breakdown[0].rank, 0);
        QCOMPARE(analysis->breakdown[0].step.value_or(-1), 0);
        QCOMPARE(analysis->breakdown[3].rank, 1);
        QCOMPARE(analysis->breakdown[3].step.value_or(-1), 1);
        bool said = false;
        for (const auto& note : analysis->notes)
            said = said || note.find("no predicted work") != std::string::npos;
        QVERIFY(said);
        QVERIFY(!analysis->cost_model.has_value());
    }

    void gzip_is_identical() {
        const std::string plain = (dir_ / "plain.fulcrum").string(),
                          gz = (dir_ / "gz.fulcrum").string();
        gzip_to((dir_ / "rank0.json.gz").string(), slurp(kData + "rank0.json"));
        gzip_to((dir_ / "rank1.json.gz").string(), slurp(kData + "rank1.json"));
        QVERIFY(importer::import_files({kData + "rank0.json", kData + "rank1.json"}, plain));
        QVERIFY(importer::import_files(
            {(dir_ / "rank0.json.gz").string(), (dir_ / "rank1.json.gz").string()}, gz));
        auto a = store::TraceReader::open(plain), b = store::TraceReader::open(gz);
        QVERIFY(a && b);
        QCOMPARE(a->lanes().size(), b->lanes().size());
        for (std::size_t i = 0; i < a->lanes().size(); ++i) {
            auto ea = a->events_in_window(a->lanes()[i].id, INT64_MIN / 4, INT64_MAX / 4);
            auto eb = b->events_in_window(b->lanes()[i].id, INT64_MIN / 4, INT64_MAX / 4);
            QVERIFY(ea && eb);
            QCOMPARE(ea->size(), eb->size());
            for (std::size_t j = 0; j < ea->size(); ++j) {
                QCOMPARE((*ea)[j].start_ns, (*eb)[j].start_ns);
                QCOMPARE((*ea)[j].end_ns, (*eb)[j].end_ns);
                QCOMPARE(a->string((*ea)[j].name), b->string((*eb)[j].name));
                QCOMPARE((*ea)[j].step, (*eb)[j].step);
            }
        }
    }

    // Files read side by side (ImportOptions::threads) make the run one worker makes: the
    // same rows, and the same warnings in input order, whichever file finished first.
    void files_read_side_by_side_make_the_same_run() {
        const std::vector<std::string> inputs = {kData + "rank1.json", kData + "rank0.json"};
        importer::ImportOptions options;
        options.run_name = "two ranks";
        options.threads = 1;
        const std::string serial = (dir_ / "serial.fulcrum").string();
        const std::string parallel = (dir_ / "parallel.fulcrum").string();
        auto one = importer::import_files(inputs, serial, options);
        QVERIFY2(one, one ? "" : one.error().message.c_str());
        options.threads = 2;
        std::vector<double> fractions;
        options.progress = [&](std::string_view, double fraction) {
            fractions.push_back(fraction);
        };
        auto two = importer::import_files(inputs, parallel, options);
        QVERIFY2(two, two ? "" : two.error().message.c_str());
        QCOMPARE(two->warnings, one->warnings);
        QCOMPARE(two->events, one->events);
        // The command lines are equal too: both name the inputs in the order given.
        const std::string difference = test::run_difference(serial, parallel);
        QVERIFY2(difference.empty(), difference.c_str());
        QVERIFY(!fractions.empty() && fractions.back() <= 1.0);
    }

    void bad_records_logged() {
        const std::string out = (dir_ / "bad.fulcrum").string();
        auto result = importer::import_files({kData + "bad.json"}, out);
        QVERIFY2(result, result ? "" : result.error().message.c_str());
        auto reader = store::TraceReader::open(out);
        QVERIFY(reader);
        for (const char* name : {"ok_before", "mystery", "begin_end", "ok_after"}) {
            QCOMPARE(find(*reader, name, 0).size(), std::size_t(1));
        }
        QCOMPARE(find(*reader, "negative", 0).size(), std::size_t(0));
        QCOMPARE(find(*reader, "no_ts", 0).size(), std::size_t(0));
        QCOMPARE(find(*reader, "weird", 0).size(), std::size_t(0));
        const Found be = one(*reader, "begin_end", 0);
        QCOMPARE(be.event.end_ns - be.event.start_ns, std::int64_t(5000));
        auto log = reader->import_log();
        QVERIFY(log);
        std::string all;
        for (const auto& entry : *log)
            all += entry.reason + "\n";
        QVERIFY2(all.find("unknown event type \"ph\": \"Z\"") != std::string::npos, all.c_str());
        QVERIFY2(all.find("negative \"dur\"") != std::string::npos, all.c_str());
        QVERIFY2(all.find("no \"ts\"") != std::string::npos, all.c_str());
        QVERIFY2(all.find("unknown category \"mystery_cat\": 1 events") != std::string::npos,
                 all.c_str());
        QVERIFY2(all.find("not a JSON object") != std::string::npos, all.c_str());
        // Skipped means not imported: the four bad records (ph "Z", negative dur, no ts, not an
        // object). The unknown category and the missing base time and rank are notes: their
        // events were imported.
        std::int64_t skipped = 0, notes = 0;
        for (const auto& entry : *log) {
            skipped += entry.skipped;
            notes += entry.skipped == 0 ? 1 : 0;
            QCOMPARE(entry.skipped == 0, entry.reason.rfind("note:", 0) == 0);
        }
        QCOMPARE(skipped, std::int64_t(4));
        QCOMPARE(result->skipped, std::int64_t(4));
        QCOMPARE(result->notes, notes);
        QVERIFY(notes >= 1);
    }

    void truncated_json() {
        const std::string text = slurp(kData + "rank0.json");
        const auto cut = text.find("\"ProfilerStep#1\"") + 5;  // mid-object
        spit((dir_ / "cut.json").string(), text.substr(0, cut));
        const std::string out = (dir_ / "cut.fulcrum").string();
        auto result = importer::import_files({(dir_ / "cut.json").string()}, out);
        QVERIFY2(result, result ? "" : result.error().message.c_str());
        // Said in the report too, so the command can say the run is incomplete.
        QCOMPARE(result->truncated.size(), std::size_t(1));
        QVERIFY(result->truncated.front().find("cut.json") != std::string::npos);
        auto reader = store::TraceReader::open(out);
        QVERIFY(reader);
        QCOMPARE(find(*reader, "aten::mm", 0).size(), std::size_t(1));
        QCOMPARE(find(*reader, "step", 0).size(), std::size_t(1));
        auto log = reader->import_log();
        QVERIFY(log);
        bool said = false, no_base = false;
        for (const auto& entry : *log) {
            said = said || entry.reason.find("truncated at byte") != std::string::npos;
            no_base = no_base || entry.reason.find("no baseTimeNanoseconds") != std::string::npos;
        }
        QVERIFY(said);
        QVERIFY(no_base);  // it was at the end of the file
    }

    void truncated_gzip() {
        const std::string text = slurp(kData + "rank0.json");
        gzip_to((dir_ / "full.json.gz").string(), text);
        const std::string gz = slurp((dir_ / "full.json.gz").string());
        spit((dir_ / "cut.json.gz").string(), std::string_view(gz).substr(0, gz.size() * 2 / 3));
        const std::string out = (dir_ / "cutgz.fulcrum").string();
        auto result = importer::import_files({(dir_ / "cut.json.gz").string()}, out);
        QVERIFY2(result, result ? "" : result.error().message.c_str());
        QCOMPARE(result->truncated.size(), std::size_t(1));
        auto reader = store::TraceReader::open(out);
        QVERIFY(reader);
        auto log = reader->import_log();
        QVERIFY(log);
        bool said = false;
        for (const auto& entry : *log)
            said = said || entry.reason.find("truncated at byte") != std::string::npos;
        QVERIFY(said);
        QVERIFY(reader->summary() && reader->summary()->event_count > 0);
    }

    // A gzip file is read ahead on a thread, in 1 MiB chunks the parser takes whole, and a
    // plain one is mapped, its pages let go every 16 MiB behind the parser
    // (core/import/kineto/json_stream.cpp); the importer must make of either what it makes of
    // the same bytes read in place from memory: events across chunk boundaries, one event
    // longer than a chunk's headroom across a boundary, gzip, and files cut short.
    void read_ahead_reads_what_memory_reads() {
        const auto trace_text = [](std::size_t size) {
            std::string text = "{\"traceEvents\": [\n";
            char line[256];
            for (int i = 0; text.size() < size; ++i) {
                if (text.size() > (1u << 20) - (100u << 10) && text.size() < (1u << 20)) {
                    text += "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"" +
                            std::string(300000, 'n') +
                            "\", \"pid\": 1, \"tid\": 1, \"ts\": 5, \"dur\": 1},\n";
                }
                std::snprintf(line, sizeof line,
                              "{\"ph\": \"X\", \"cat\": \"%s\", \"name\": \"op%d\", \"pid\": %d, "
                              "\"tid\": %d, \"ts\": %d.5, \"dur\": 1.25, \"args\": {\"stream\": 7, "
                              "\"correlation\": %d}},\n",
                              i % 3 == 0 ? "kernel" : "cpu_op", i % 100, i % 3 == 0 ? 0 : 1,
                              i % 3 == 0 ? 7 : 1, 10 + i * 2, i);
                text += line;
            }
            text +=
                "{\"ph\": \"i\", \"s\": \"t\", \"name\": \"last\", \"pid\": 1, \"tid\": 1, "
                "\"ts\": 1}\n], \"baseTimeNanoseconds\": 1700000000000000000}\n";
            return text;
        };
        const std::string plain = trace_text(40u << 20);  // past two let-go windows
        spit((dir_ / "big.json").string(), plain);
        spit((dir_ / "big-cut.json").string(), std::string_view(plain).substr(0, plain.size() / 2));
        gzip_to((dir_ / "big.json.gz").string(), trace_text(3u << 20));
        const std::string gz = slurp((dir_ / "big.json.gz").string());
        spit((dir_ / "big-cut.json.gz").string(), std::string_view(gz).substr(0, gz.size() / 2));
        auto kineto = importer::make_kineto_importer();
        for (const char* name : {"big.json", "big-cut.json", "big.json.gz", "big-cut.json.gz"}) {
            const std::string path = (dir_ / name).string();
            const std::string bytes = slurp(path);
            MemorySink from_file, from_memory;
            QVERIFY(kineto->read(importer::ImportInput{path}, from_file, {}));
            QVERIFY(kineto->read(importer::ImportInput{path, &bytes}, from_memory, {}));
            QVERIFY2(from_file.problems().empty(), name);
            QVERIFY2(from_file.events().size() > 10000, name);
            QVERIFY2(from_file.events() == from_memory.events(), name);
            QCOMPARE(from_file.lanes().size(), from_memory.lanes().size());
            QCOMPARE(from_file.import_log().size(), from_memory.import_log().size());
            bool cut = false;
            for (std::size_t i = 0; i < from_file.import_log().size(); ++i) {
                const std::string& reason = from_file.import_log()[i].reason;
                cut = cut || reason.find("truncated at byte") != std::string::npos;
                // Where the stream stopped is the same; zlib words a cut stream its own way
                // through gzread and through inflate.
                const std::string head = reason.substr(0, reason.find(" (gzip"));
                QCOMPARE(head, from_memory.import_log()[i].reason.substr(0, head.size()));
            }
            QCOMPARE(cut, std::string_view(name).starts_with("big-cut"));
        }
    }

    // Pass 1 looks for its words in the event's name alone when the name comes first and plain
    // (as Kineto writes it), and in the whole event otherwise.
    void leading_name_is_the_name_or_nothing() {
        using importer::kineto::leading_name;
        const auto name = [](std::string_view event) {
            return leading_name(event).value_or("(none)");
        };
        QCOMPARE(name(R"({"ph": "X", "cat": "cpu_op", "name": "c10d::send", "args": {"a": 1}})"),
                 std::string_view(R"("c10d::send")"));
        QCOMPARE(name(R"({"name"  :  "PP:1F0", "ph": "X"})"), std::string_view(R"("PP:1F0")"));
        QCOMPARE(name(R"({"ph": "X", "args": {"name": "inner"}, "name": "outer"})"),
                 std::string_view("(none)"));  // a nested object first
        QCOMPARE(name(R"({"name": "a\"b", "ph": "X"})"), std::string_view("(none)"));  // escape
        QCOMPARE(name(R"({"label": "name", "name": "z"})"), std::string_view("(none)"));
        QCOMPARE(name(R"({"ph": "X", "name": 7})"), std::string_view("(none)"));
        QCOMPARE(name(R"({"ph": "X", "name": "unterminated)"), std::string_view("(none)"));
    }

    // An imported run keeps its events in blocks; its copy as rows for SQL (`fulcrum export
    // --format sqlite`) is the same run, row for row: run and rank rows, lanes, every event with
    // its names and args, counters, workload and import log, with an event pack that is its rows.
    void rows_copy_is_the_imported_run_data() {
        QTest::addColumn<QString>("input");
        QTest::newRow("rank0") << QString::fromStdString(kData + "rank0.json");
        QTest::newRow("simple_add.gz") << QString::fromStdString(kData + "hta/simple_add.json.gz");
        QTest::newRow("mtia_small.gz") << QString::fromStdString(kData + "hta/mtia_small.json.gz");
        QTest::newRow("bad records") << QString::fromStdString(kData + "bad.json");
    }
    void rows_copy_is_the_imported_run() {
        QFETCH(QString, input);
        const std::string run = (dir_ / "blocks.fulcrum").string();
        const std::string rows = (dir_ / "rows.fulcrum").string();
        importer::ImportOptions options;
        options.overwrite = true;
        auto report = importer::import_files({input.toStdString()}, run, options);
        QVERIFY2(report, report ? "" : report.error().message.c_str());
        QVERIFY(report->events > 0);
        QVERIFY(store::TraceReader::open(run)->events_in_blocks());
        store::MergeOptions overwrite;
        overwrite.overwrite = true;
        auto copied = store::write_rows_copy(run, rows, overwrite);
        QVERIFY2(copied, copied ? "" : copied.error().message.c_str());
        QCOMPARE(*copied, report->events);
        QVERIFY(!store::TraceReader::open(rows)->events_in_blocks());
        const std::string difference = test::run_difference(run, rows);
        QVERIFY2(difference.empty(), difference.c_str());
        QVERIFY(!fs::exists(run + ".partial"));
    }

    // An import that is cancelled (or fails) leaves neither the run nor its partial file.
    void cancelled_import_leaves_nothing() {
        const std::string out = (dir_ / "cancelled.fulcrum").string();
        std::atomic<bool> cancel{true};
        importer::ImportOptions options;
        options.cancel = &cancel;
        auto report = importer::import_files({kData + "rank0.json"}, out, options);
        QVERIFY(!report);
        QCOMPARE(report.error().code, ErrorCode::cancelled);
        QVERIFY(!fs::exists(out));
        QVERIFY(!fs::exists(out + ".partial"));
    }

    void cli_import() {
        const std::string out = (dir_ / "cli.fulcrum").string();
        const std::string command = std::string(FULCRUM_BINARY_DIR) + "/app/fulcrum import " +
                                    kData + "rank0.json " + kData + "rank1.json -o " + out +
                                    " 2>&1";
        FILE* pipe = popen(command.c_str(), "r");
        QVERIFY(pipe != nullptr);
        std::string output;
        char buffer[512];
        while (fgets(buffer, sizeof buffer, pipe) != nullptr)
            output += buffer;
        const int status = pclose(pipe);
        QVERIFY2(status == 0, output.c_str());
        QVERIFY2(output.find("imported 2 kineto-json files (2 ranks") != std::string::npos,
                 output.c_str());
        QVERIFY(fs::exists(out));
    }
};

QTEST_GUILESS_MAIN(TestKinetoImport)
#include "test_kineto_import.moc"
