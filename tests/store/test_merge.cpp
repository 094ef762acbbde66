// Merge: rank files on skewed clocks become one run on one clock.
#include <QTemporaryDir>
#include <QTest>

#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include "core/store/lane_summary.h"
#include "core/store/lane_summary_file.h"
#include "core/store/merge.h"
#include "core/store/trace_reader.h"
#include "core/store/trace_writer.h"
#include "tests/support/synthetic_run.h"

using namespace fulcrum;
using namespace fulcrum::store;
using fulcrum::testing::SyntheticRunOptions;
using fulcrum::testing::write_synthetic_rank_files;

namespace {

// Merged start time of every event named `name` on each rank, in order.
std::map<std::int32_t, std::vector<std::int64_t>> starts_of(const TraceReader& trace,
                                                            std::string_view name) {
    std::map<std::int32_t, std::vector<std::int64_t>> starts;
    for (const auto& lane : trace.lanes()) {
        (void)trace.for_each_event(lane.id, [&](const Event& e) {
            if (trace.string(e.name) == name) {
                starts[lane.rank].push_back(e.start_ns);
            }
            return true;
        });
    }
    return starts;
}

std::vector<std::string> synthetic(const QTemporaryDir& dir, SyntheticRunOptions options) {
    auto paths = write_synthetic_rank_files(dir.filePath("ranks").toStdString(), options);
    if (!paths) {
        qFatal("%s", paths.error().message.c_str());
    }
    return *paths;
}

}  // namespace

class MergeTest : public QObject {
    Q_OBJECT

private slots:
    // The synthetic ranks leave their barrier at the same true instant on clocks skewed by
    // up to 3 ms: aligned on the marks, they coincide exactly.
    void barrierMarksAlignSkewedClocks() {
        QTemporaryDir dir;
        SyntheticRunOptions options;
        options.dp = 2;
        options.pp = 2;
        const auto inputs = synthetic(dir, options);
        QCOMPARE(inputs.size(), 4u);
        std::int64_t input_events = 0, input_workload = 0;
        for (const auto& input : inputs) {
            auto trace = TraceReader::open(input);
            input_events += trace->summary()->event_count;
            input_workload += static_cast<std::int64_t>(trace->workload()->size());
        }

        const std::string output = dir.filePath("run.fulcrum").toStdString();
        auto report = merge_rank_files(inputs, output);
        QVERIFY2(report.ok(), report.ok() ? "" : report.error().message.c_str());
        QVERIFY(report->warnings.empty());
        QCOMPARE(report->events, input_events);

        auto merged = TraceReader::open(output);
        QVERIFY(merged.ok());
        QVERIFY(merged->has_indexes());
        QCOMPARE(merged->ranks().size(), 4u);
        for (const auto& rank : merged->ranks()) {
            QCOMPARE(rank.alignment, ClockAlignment::barrier_marks);
            QVERIFY(rank.complete);
            // picotron's grid order: rank = (dp * pp + pp_i) * cp ... with cp = tp = 1
            QCOMPARE(rank.dp, rank.rank / 2);
            QCOMPARE(rank.pp, rank.rank % 2);
        }
        const auto marks = starts_of(*merged, kClockSyncMark);
        QCOMPARE(marks.size(), 4u);
        for (const auto& [rank, times] : marks) {
            QCOMPARE(times, marks.at(0));
        }
        // Step ranges start together on every rank once aligned.
        const auto steps = starts_of(*merged, "step");
        for (const auto& [rank, times] : steps) {
            QCOMPARE(times, steps.at(0));
        }
        // The run's zero is its first event.
        QCOMPARE(merged->summary()->start_ns, 0);
        QCOMPARE(static_cast<std::int64_t>(merged->workload()->size()), input_workload);
        // Names still resolve after the string tables were merged.
        QVERIFY(merged->summary()->events_by_kind[int(EventKind::collective)] > 0);
        auto collectives = merged->events_of_kind_for_step(EventKind::collective, 1);
        QVERIFY(!collectives->empty());
        for (const auto& e : *collectives) {
            QVERIFY(merged->string(e.name) == "dp all-reduce gradients" ||
                    merged->string(e.name).starts_with("send "));
        }
    }

    // Without marks merge falls back to each file's UTC offset, which is only as good as
    // the hosts' NTP: ranks agree to within the offsets' error (200 us here), not exactly.
    void utcOffsetsWhenThereAreNoMarks() {
        QTemporaryDir dir;
        SyntheticRunOptions options;
        options.pp = 4;
        options.clock_sync_marks = false;
        const auto inputs = synthetic(dir, options);
        const std::string output = dir.filePath("run.fulcrum").toStdString();
        auto report = merge_rank_files(inputs, output);
        QVERIFY(report.ok());
        auto merged = TraceReader::open(output);
        for (const auto& rank : merged->ranks()) {
            QCOMPARE(rank.alignment, ClockAlignment::utc_offset);
        }
        const auto steps = starts_of(*merged, "step");
        bool any_difference = false;
        for (const auto& [rank, times] : steps) {
            for (std::size_t i = 0; i < times.size(); ++i) {
                const std::int64_t error = times[i] - steps.at(0)[i];
                QVERIFY(std::llabs(error) <= 2 * options.utc_offset_error_ns);
                any_difference |= error != 0;
            }
        }
        QVERIFY(any_difference);
    }

    // Rank files with their events in blocks or in rows merge into the same run: the same
    // events, in the same order (lane by lane, by start, end descending), kept in blocks whose
    // lanes follow each other in time. Merged as rows (--rows), or copied to rows afterwards
    // (export --format sqlite), the run has the same events as rows, and the same event pack
    // whichever way its rows came.
    void blockAndRowRankFilesMergeToOneRun() {
        QTemporaryDir dir;
        SyntheticRunOptions options;
        options.dp = 2;
        options.kernels_per_layer = 3;
        options.event_blocks = true;
        auto blocks = write_synthetic_rank_files(dir.filePath("blocks").toStdString(), options);
        options.event_blocks = false;
        auto rows = write_synthetic_rank_files(dir.filePath("rows").toStdString(), options);
        QVERIFY(blocks.ok() && rows.ok());
        QVERIFY(TraceReader::open(blocks->front())->events_in_blocks());
        QVERIFY(!TraceReader::open(rows->front())->events_in_blocks());
        const auto merge = [&](const std::vector<std::string>& inputs, const char* name,
                               WriterOptions::EventStorage storage) {
            const std::string path = dir.filePath(name).toStdString();
            MergeOptions merge_options;
            merge_options.events = storage;
            auto report = merge_rank_files(inputs, path, merge_options);
            if (!report) {
                qFatal("%s", report.error().message.c_str());
            }
            return std::pair{path, *report};
        };
        using Storage = WriterOptions::EventStorage;
        const auto [from_blocks, blocks_report] = merge(*blocks, "blocks.fulcrum", Storage::blocks);
        const auto [from_rows, rows_report] = merge(*rows, "rows.fulcrum", Storage::blocks);
        const auto [blocks_as_rows, unused_a] = merge(*blocks, "b-rows.fulcrum", Storage::rows);
        const auto [rows_as_rows, unused_b] = merge(*rows, "r-rows.fulcrum", Storage::rows);
        QCOMPARE(blocks_report.events, rows_report.events);
        QCOMPARE(blocks_report.start_utc_ns, rows_report.start_utc_ns);
        for (std::size_t i = 0; i < blocks_report.ranks.size(); ++i) {
            QCOMPARE(blocks_report.ranks[i].alignment, ClockAlignment::barrier_marks);
            QCOMPARE(blocks_report.ranks[i].clock_shift_ns, rows_report.ranks[i].clock_shift_ns);
        }
        const auto events_of = [](const std::string& path) {
            auto trace = TraceReader::open(path);
            std::vector<std::tuple<std::uint32_t, std::int64_t, std::int64_t, std::string,
                                   std::int32_t, std::int64_t>>
                events;
            auto range = trace->event_rowids();
            (void)trace->scan_events(range->first, range->second, [&](const Event& e) {
                events.emplace_back(e.lane.value, e.start_ns, e.end_ns,
                                    std::string(trace->string(e.name)), e.step, e.correlation);
                return true;
            });
            return events;
        };
        const auto expected = events_of(from_rows);
        QCOMPARE(static_cast<std::int64_t>(expected.size()), rows_report.events);
        QVERIFY(std::is_sorted(expected.begin(), expected.end(), [](const auto& a, const auto& b) {
            return std::get<0>(a) != std::get<0>(b)   ? std::get<0>(a) < std::get<0>(b)
                   : std::get<1>(a) != std::get<1>(b) ? std::get<1>(a) < std::get<1>(b)
                                                      : std::get<2>(a) > std::get<2>(b);
        }));
        QCOMPARE(events_of(from_blocks), expected);
        QCOMPARE(events_of(blocks_as_rows), expected);
        QCOMPARE(events_of(rows_as_rows), expected);
        QVERIFY(TraceReader::open(from_blocks)->events_in_blocks());
        QVERIFY(TraceReader::open(from_rows)->events_in_blocks());
        QVERIFY(!TraceReader::open(blocks_as_rows)->events_in_blocks());
        QVERIFY(TraceReader::open(blocks_as_rows)->event_pack()->has_value());

        // A copy of the run of blocks as rows: the same events, and ranks and run row as they
        // were (no second clock shift).
        const std::string copy = dir.filePath("copy.fulcrum").toStdString();
        auto copied = write_rows_copy(from_blocks, copy);
        QVERIFY2(copied.ok(), copied.ok() ? "" : copied.error().message.c_str());
        QCOMPARE(*copied, blocks_report.events);
        QCOMPARE(events_of(copy), expected);
        auto copy_trace = TraceReader::open(copy);
        QVERIFY(!copy_trace->events_in_blocks());
        QVERIFY(copy_trace->has_indexes());
        QCOMPARE(copy_trace->run().start_utc_ns, blocks_report.start_utc_ns);
        for (std::size_t i = 0; i < blocks_report.ranks.size(); ++i) {
            QCOMPARE(copy_trace->ranks()[i].clock_shift_ns, blocks_report.ranks[i].clock_shift_ns);
            QCOMPARE(copy_trace->ranks()[i].alignment, ClockAlignment::barrier_marks);
        }
        // The pack merge makes while decoding blocks is the one it makes by reading rows back.
        const auto pack_of = [](const std::string& path) {
            std::vector<std::tuple<std::int64_t, std::int64_t, std::string>> blocks;
            auto db = Database::open(path, Database::Mode::read_only);
            auto stmt = db->prepare("SELECT lane, events, data FROM event_pack ORDER BY rowid");
            while (stmt->step()) {
                blocks.emplace_back(stmt->column_int64(0), stmt->column_int64(1),
                                    std::string(stmt->column_blob(2)));
            }
            return blocks;
        };
        QVERIFY(!pack_of(blocks_as_rows).empty());
        QVERIFY(pack_of(blocks_as_rows) == pack_of(rows_as_rows));
        QVERIFY(copy_trace->event_pack()->has_value());  // names may have other ids: not equal
        // The timeline's lane summaries, made as the events went in: one per lane, the same as
        // summarizing the merged file afresh.
        {
            const std::string fresh = dir.filePath("fresh.fulcrum").toStdString();
            std::filesystem::copy_file(from_blocks, fresh);
            QVERIFY(Database::open(fresh, Database::Mode::read_write)
                        ->exec("DROP TABLE lane_summary")
                        .ok());
            QVERIFY(build_lane_summaries(fresh).ok());
            auto merged = TraceReader::open(from_blocks);
            auto stored = merged->lane_summaries();
            auto rebuilt = TraceReader::open(fresh)->lane_summaries();
            QVERIFY(stored.ok() && stored->has_value() && rebuilt.ok() && rebuilt->has_value());
            QCOMPARE((*stored)->size(), merged->lanes().size());
            QCOMPARE((*stored)->size(), (*rebuilt)->size());
            for (std::size_t i = 0; i < (*stored)->size(); ++i) {
                const LaneSummary& a = (**stored)[i];
                const LaneSummary& b = (**rebuilt)[i];
                QCOMPARE(a.lane, b.lane);
                QCOMPARE(a.events, b.events);
                QVERIFY(a.events > 0);
                QCOMPARE(a.depths, b.depths);
                QCOMPARE(a.levels.size(), b.levels.size());
                for (std::size_t level = 0; level < a.levels.size(); ++level) {
                    QCOMPARE(a.levels[level].shift, b.levels[level].shift);
                    QVERIFY(a.levels[level].bins == b.levels[level].bins);
                }
            }
        }
        // A lane's blocks in the merged run follow each other: each starts at or after the
        // last start of the one before.
        auto db = Database::open(from_blocks, Database::Mode::read_only);
        QCOMPARE(*db->query_int("SELECT COUNT(*) FROM event_block b JOIN event_block p "
                                "ON p.lane = b.lane AND p.rowid < b.rowid "
                                "WHERE b.start_min < p.start_max"),
                 std::int64_t{0});
    }

    void incompleteRankIsKeptAndReported() {
        QTemporaryDir dir;
        const auto inputs = synthetic(dir, SyntheticRunOptions{});
        // Make rank 1 look like its writer was killed before closing.
        sqlite3* db = nullptr;
        QCOMPARE(sqlite3_open(inputs[1].c_str(), &db), SQLITE_OK);
        QCOMPARE(sqlite3_exec(db, "UPDATE rank SET complete = 0", nullptr, nullptr, nullptr),
                 SQLITE_OK);
        sqlite3_close(db);
        const std::string output = dir.filePath("run.fulcrum").toStdString();
        auto report = merge_rank_files(inputs, output);
        QVERIFY(report.ok());
        QCOMPARE(report->warnings.size(), 1u);
        QVERIFY(report->warnings[0].find("rank 1 is incomplete") != std::string::npos);
        auto merged = TraceReader::open(output);
        QVERIFY(merged->incomplete());
        QVERIFY(!merged->ranks()[1].complete);
    }

    void refusesWhatItCannotMerge() {
        QTemporaryDir dir;
        const auto inputs = synthetic(dir, SyntheticRunOptions{});
        const std::string output = dir.filePath("run.fulcrum").toStdString();

        auto duplicate = merge_rank_files({inputs[0], inputs[0]}, output);
        QVERIFY(!duplicate.ok());
        QVERIFY(duplicate.error().message.find("rank 0 is in both") != std::string::npos);

        const std::string junk = dir.filePath("junk.sqlite").toStdString();
        std::ofstream(junk) << "not a trace";
        auto bad = merge_rank_files({inputs[0], junk}, output);
        QVERIFY(!bad.ok());
        QVERIFY(bad.error().message.find(junk) != std::string::npos);
        QVERIFY(!std::filesystem::exists(output));

        auto nowhere = merge_rank_files(inputs, "/nonexistent-dir/run.fulcrum");
        QVERIFY(!nowhere.ok());
        QVERIFY(nowhere.error().message.find("/nonexistent-dir/run.fulcrum") != std::string::npos);

        QVERIFY(merge_rank_files(inputs, output).ok());
        const auto size = std::filesystem::file_size(output);
        auto again = merge_rank_files(inputs, output);
        QVERIFY(!again.ok());
        QVERIFY(again.error().message.find("already exists") != std::string::npos);
        QCOMPARE(std::filesystem::file_size(output), size);
        MergeOptions force;
        force.overwrite = true;
        QVERIFY(merge_rank_files(inputs, output, force).ok());
        QVERIFY(!std::filesystem::exists(output + ".partial"));
    }

    // A rank file's lanes are decoded, re-timed and compressed side by side; the writer puts
    // them in lane order, so the run's blocks and summaries are those one thread makes, byte
    // for byte, whatever the number of threads.
    void lanesSideBySideMakeTheSameRun() {
        QTemporaryDir dir;
        SyntheticRunOptions options;
        options.dp = 2;
        options.steps = 48;  // a stream lane of more than one block
        options.layers = 4;
        options.microbatches = 8;
        options.kernels_per_layer = 24;
        const auto inputs = synthetic(dir, options);
        const auto rows_of = [](const std::string& path, const char* sql) {
            sqlite3* db = nullptr;
            if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
                qFatal("cannot open %s", path.c_str());
            }
            sqlite3_stmt* stmt = nullptr;
            if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) != SQLITE_OK) {
                qFatal("%s", sqlite3_errmsg(db));
            }
            std::vector<std::string> rows;
            while (sqlite3_step(stmt) == SQLITE_ROW) {
                std::string row;
                for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
                    const auto* bytes = static_cast<const char*>(sqlite3_column_blob(stmt, c));
                    row += std::string(bytes != nullptr ? bytes : "",
                                       static_cast<std::size_t>(sqlite3_column_bytes(stmt, c)));
                    row += '\x1f';
                }
                rows.push_back(std::move(row));
            }
            sqlite3_finalize(stmt);
            sqlite3_close(db);
            return rows;
        };
        std::vector<std::string> blocks, summaries;
        std::vector<double> progress;
        for (const int threads : {1, 3}) {
            const std::string output =
                dir.filePath(QString("run-%1.fulcrum").arg(threads)).toStdString();
            MergeOptions merge;
            merge.threads = threads;
            std::vector<double> seen;
            merge.progress = [&](double fraction) {
                seen.push_back(fraction);
                return true;
            };
            QVERIFY(merge_rank_files(inputs, output, merge).ok());
            const auto these_blocks = rows_of(output, "SELECT * FROM event_block ORDER BY rowid");
            const auto these_summaries =
                rows_of(output, "SELECT * FROM lane_summary ORDER BY lane");
            QVERIFY(!these_summaries.empty());
            if (threads == 1) {
                blocks = these_blocks;
                summaries = these_summaries;
                progress = seen;
                // More blocks than lanes: some lane was cut into several.
                QVERIFY(blocks.size() > summaries.size());
            } else {
                QCOMPARE(these_blocks, blocks);
                QCOMPARE(these_summaries, summaries);
                QCOMPARE(seen, progress);
            }
        }
    }

    void cancelLeavesNothingBehind() {
        QTemporaryDir dir;
        const auto inputs = synthetic(dir, SyntheticRunOptions{});
        const std::string output = dir.filePath("run.fulcrum").toStdString();
        MergeOptions options;
        options.progress = [](double fraction) { return fraction < 0.4; };
        auto report = merge_rank_files(inputs, output, options);
        QVERIFY(!report.ok());
        QCOMPARE(report.error().code, ErrorCode::cancelled);
        QVERIFY(!std::filesystem::exists(output));
        QVERIFY(!std::filesystem::exists(output + ".partial"));
    }

    // One rank file is one source: progress moves lane by lane within it, rising and ending at
    // 1, and a cancel inside it stops the merge there.
    void progressMovesWithinOneSource() {
        QTemporaryDir dir;
        SyntheticRunOptions options;
        options.kernels_per_layer = 2;  // a host lane and a stream lane per rank
        const auto inputs = synthetic(dir, options);
        const std::string output = dir.filePath("run.fulcrum").toStdString();
        MergeOptions merge;
        std::vector<double> seen;
        merge.progress = [&](double fraction) {
            seen.push_back(fraction);
            return true;
        };
        QVERIFY(merge_rank_files({inputs.front()}, output, merge).ok());
        QVERIFY(std::is_sorted(seen.begin(), seen.end()));
        QVERIFY(std::any_of(seen.begin(), seen.end(), [](double f) { return f > 0 && f < 1; }));
        QCOMPARE(seen.back(), 1.0);
        merge.overwrite = true;
        merge.progress = [](double fraction) { return fraction < 0.3; };
        auto cancelled = merge_rank_files({inputs.front()}, output, merge);
        QVERIFY(!cancelled.ok());
        QCOMPARE(cancelled.error().code, ErrorCode::cancelled);
        QVERIFY(!std::filesystem::exists(output + ".partial"));
        QVERIFY(TraceReader::open(output).ok());  // the run merged before is still there
    }
};

QTEST_GUILESS_MAIN(MergeTest)
#include "test_merge.moc"
