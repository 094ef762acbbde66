// CP attention load on hand-built CP groups: measured attention and predicted pairs per CP rank,
// their imbalance, and what the other shardings would have predicted. Work in comments is
// causal pairs doubled, (2p + 1 + ℓ)·ℓ, as core/balance/cp_shard.h counts it; max/mean is the
// same either way.
#include <QTemporaryDir>
#include <QTest>

#include "core/analysis/cp_load.h"
#include "core/balance/cp_shard.h"
#include "core/store/trace_reader.h"
#include "core/store/trace_writer.h"
#include "tests/analysis/trace_builders.h"

using namespace fulcrum;
using namespace fulcrum::analysis;
using namespace fulcrum::analysis::builders;

Q_DECLARE_METATYPE(fulcrum::balance::CpSharding)

namespace {

// A pass of `rank` whose attention lasts `attention_ns`.
void pass_with_attention(RunTrace& trace, int rank, std::int64_t start, int step, int mb,
                         Phase phase, std::int64_t attention_ns) {
    const char* name = phase == Phase::forward ? "forward" : "backward";
    trace.add_range(host(trace, rank), name, Category::compute, start, start + attention_ns + 1000,
                    step, mb, 0, phase);
    trace.add_range(host(trace, rank), "attention", Category::attention, start,
                    start + attention_ns, step, mb, 0, phase);
}

void row(RunTrace& trace, int rank, int step, int mb, std::int64_t doc, int length, int begin,
         int end, const std::string& balancer = "fixed") {
    trace.workload.push_back({rank, step, mb, doc, length, begin, end, balancer});
}

// measuredAndPredictedByHand's group: rank 1's passes (5 ms of attention each way), and the
// rows of A[0,4) on rank 0, A[4,6) and B[0,2) on rank 1.
void add_hand_group_rank1_and_rows(RunTrace& trace) {
    pass_with_attention(trace, 1, 0, 0, 0, Phase::forward, 5'000'000);
    pass_with_attention(trace, 1, 50'000'000, 0, 0, Phase::backward, 5'000'000);
    row(trace, 0, 0, 0, 7, 6, 0, 4);
    row(trace, 1, 0, 0, 7, 6, 4, 6);
    row(trace, 1, 0, 0, 9, 2, 0, 2);
}

double predicted_for(const CpGroupLoad& group, const std::string& sharding) {
    for (const auto& [name, value] : group.predicted_by_sharding.named()) {
        if (name == sharding) {
            return value;
        }
    }
    return -1;
}

// `trace`'s ranks and workload written to a run file as a merge lays a run out: rank by rank,
// and within a rank its rows in the order given, then read back.
std::string write_workload_file(const QTemporaryDir& dir, const RunTrace& trace) {
    const std::string path = dir.filePath("run.fulcrum").toStdString();
    RunInfo run;
    run.name = "cp-load-workload";
    run.config_json = trace.run.config_json;
    auto writer = store::TraceWriter::create(path, run);
    if (!writer) {
        return {};
    }
    std::vector<WorkloadEntry> rows = trace.workload;
    std::stable_sort(rows.begin(), rows.end(), [](const WorkloadEntry& a, const WorkloadEntry& b) {
        return a.rank < b.rank;
    });
    for (const RankTrace& rank : trace.ranks) {
        (*writer)->add_rank(rank.info);
    }
    for (const WorkloadEntry& entry : rows) {
        (*writer)->add_workload(entry);
    }
    return (*writer)->close() ? path : std::string();
}

bool same_held(const std::vector<HeldWork>& a, const std::vector<HeldWork>& b) {
    return std::equal(
        a.begin(), a.end(), b.begin(), b.end(), [](const HeldWork& x, const HeldWork& y) {
            return std::tie(x.rank, x.step, x.microbatch, x.tokens, x.pairs, x.documents) ==
                   std::tie(y.rank, y.step, y.microbatch, y.tokens, y.pairs, y.documents);
        });
}

bool same_rows(const std::vector<WorkloadEntry>& a, const std::vector<WorkloadEntry>& b) {
    return std::equal(
        a.begin(), a.end(), b.begin(), b.end(), [](const WorkloadEntry& x, const WorkloadEntry& y) {
            return std::tie(x.rank, x.step, x.microbatch, x.doc_id, x.doc_length, x.token_begin,
                            x.token_end) == std::tie(y.rank, y.step, y.microbatch, y.doc_id,
                                                     y.doc_length, y.token_begin, y.token_end) &&
                   x.balancer.str() == y.balancer.str();
        });
}

}  // namespace

class CpLoadTest : public QObject {
    Q_OBJECT

private slots:
    // A CP group's figures take no flag beside them (a rank's part is 32 bytes, a run of 1 B
    // events has millions), and still read as optionals: absent, present (0 and a NaN-free
    // double included), converted, compared.
    void packedFiguresReadAsOptionals() {
        QCOMPARE(sizeof(CpRankLoad), 32u);
        CpRankLoad load;
        QVERIFY(!load.attention_ns);
        QCOMPARE(load.attention_ns.value_or(-5), std::int64_t{-5});
        QVERIFY(std::optional<std::int64_t>(load.tokens) == std::nullopt);
        QVERIFY_THROWS_EXCEPTION(std::bad_optional_access, load.pairs.value());
        load.pairs = 0;
        QVERIFY(load.pairs.has_value());
        QCOMPARE(*load.pairs, std::int64_t{0});
        QVERIFY(load.pairs == PackedOptional<std::int64_t>(std::optional<std::int64_t>(0)));
        QVERIFY(!(load.pairs == load.tokens));
        CpGroupLoad group;
        QVERIFY(!group.measured_imbalance);
        group.measured_imbalance = 1.5;
        QCOMPARE(std::optional<double>(group.measured_imbalance), std::optional<double>(1.5));
        group.measured_imbalance.reset();
        QVERIFY(group.measured_imbalance == std::nullopt);
    }

    // cp = 2, contiguous. Documents A (id 7, 6 tokens) and B (id 9, 2 tokens) packed as A B,
    // T = 8: rank 0 holds A[0,4), rank 1 A[4,6) and B[0,2).
    //   measured: rank 0 forward attention 20 ms with a 5 ms cp all-gather inside (15 ms) and
    //   backward 15 ms → 30 ms; rank 1 5 + 5 = 10 ms → max/mean = 30/20 = 1.5
    //   pairs (held_work, not doubled): rank 0 (1+4)·4/2 = 10; rank 1 (8+1+2)·2/2 + 3 = 14
    //   → 14/12
    // Alternatives (doubled work):
    //   contiguous: 20 vs 22 + 6 = 28 → 28/24
    //   zigzag, chunks of 2: A[0,2) A[2,4) A[4,6) B[0,2); rank 0 chunks 0, 3: 6 + 6 = 12,
    //     rank 1 chunks 1, 2: 14 + 22 = 36 → 36/24 = 1.5
    //   per-doc, 4 slots: A (6 = 4·1 + 2 leftover on slots 0, 1) → [0,2) [2,4) [4,5) [5,6);
    //     rank 0 slots 0, 3: 6 + 12 = 18; rank 1 slots 1, 2: 14 + 10 = 24; B (2 leftover on
    //     slots 2, 3) → slot 2 [0,1) to rank 1: 2, slot 3 [1,2) to rank 0: 4
    //     → 22 vs 26 → 26/24
    void measuredAndPredictedByHand() {
        RunTrace trace;
        trace.run.config_json = R"({"cp_shard":"contiguous"})";
        add_rank(trace, 0, 0, 0, 0, 0);
        add_rank(trace, 1, 0, 0, 0, 1);
        trace.add_range(host(trace, 0), "forward", Category::compute, 0, 40'000'000, 0, 0, 0,
                        Phase::forward);
        trace.add_range(host(trace, 0), "attention", Category::attention, 0, 20'000'000, 0, 0, 0,
                        Phase::forward);
        trace.add_range(host(trace, 0), "cp all-gather kv", Category::communication, 0, 5'000'000,
                        0, 0, 0, Phase::forward);
        trace.add_range(host(trace, 0), "backward", Category::compute, 50'000'000, 70'000'000, 0, 0,
                        0, Phase::backward);
        trace.add_range(host(trace, 0), "attention", Category::attention, 50'000'000, 65'000'000, 0,
                        0, 0, Phase::backward);
        add_hand_group_rank1_and_rows(trace);
        trace.finish();

        const auto analysis = analyze_cp_load(trace, find_passes(trace));
        QCOMPARE(analysis.cp, 2);
        QCOMPARE(analysis.sharding, std::string("contiguous"));
        QCOMPARE(analysis.groups.size(), 1u);
        const CpGroupLoad& group = analysis.groups[0];
        QCOMPARE(group.step, 0);
        QCOMPARE(group.microbatch, 0);
        QCOMPARE(group.ranks.size(), 2u);
        QCOMPARE(group.ranks[0].rank, 0);
        QCOMPARE(group.ranks[0].cp_rank, 0);
        QCOMPARE(group.ranks[0].attention_ns.value(), 30'000'000);
        QCOMPARE(group.ranks[1].attention_ns.value(), 10'000'000);
        QCOMPARE(group.ranks[0].tokens.value(), 4);
        QCOMPARE(group.ranks[1].tokens.value(), 4);
        QCOMPARE(group.ranks[0].pairs.value(), 10);
        QCOMPARE(group.ranks[1].pairs.value(), 14);
        QCOMPARE(group.measured_imbalance.value(), 1.5);
        QCOMPARE(group.predicted_imbalance.value(), 14.0 / 12);
        QCOMPARE(group.predicted_by_sharding.named().size(), 3u);
        QCOMPARE(predicted_for(group, "contiguous"), 28.0 / 24);
        QCOMPARE(predicted_for(group, "zigzag"), 1.5);
        QCOMPARE(predicted_for(group, "per-doc"), 26.0 / 24);
        QCOMPARE(analysis.mean_measured_imbalance.value(), 1.5);
        QCOMPARE(analysis.mean_predicted_imbalance.value(), 14.0 / 12);
        QCOMPARE(analysis.mean_predicted_by_sharding.size(), 3u);
        QCOMPARE(analysis.mean_predicted_by_sharding[1].first, std::string("zigzag"));
        QCOMPARE(analysis.mean_predicted_by_sharding[1].second, 1.5);
    }

    // The same group under Ulysses (run.config cp_impl): the heads are split for attention, so
    // each rank is predicted the group's mean, (10 + 14)/2 = 12 pairs, and the predicted
    // imbalance is 1; the measured 1.5 stays what it was.
    void ulyssesPredictsEqualShares() {
        RunTrace trace;
        trace.run.config_json = R"({"cp_shard":"contiguous","cp_impl":"ulysses"})";
        add_rank(trace, 0, 0, 0, 0, 0);
        add_rank(trace, 1, 0, 0, 0, 1);
        pass_with_attention(trace, 0, 0, 0, 0, Phase::forward, 15'000'000);
        pass_with_attention(trace, 0, 50'000'000, 0, 0, Phase::backward, 15'000'000);
        add_hand_group_rank1_and_rows(trace);
        trace.finish();
        const auto analysis = analyze_cp_load(trace, find_passes(trace));
        QCOMPARE(analysis.groups.size(), 1u);
        const CpGroupLoad& group = analysis.groups[0];
        QCOMPARE(group.ranks[0].pairs.value(), 12);
        QCOMPARE(group.ranks[1].pairs.value(), 12);
        QCOMPARE(group.predicted_imbalance.value(), 1.0);
        QCOMPARE(group.measured_imbalance.value(), 1.5);
    }

    // A zigzag run whose chunk boundaries fall between documents, so nothing links rank 0's
    // two chunks to rank 1's: reading the ranks in order (A F G H I B C D E) gets the packed
    // order wrong. Packed A B C D E F G H I, lengths 4 | 1 3 | 2 2 | 1 1 1 1, T = 16, chunks of
    // 4; zigzag gives rank 0 chunks 0 and 3 (A F G H I), rank 1 chunks 1 and 2 (B C D E).
    // Whole documents cost d(d+1): A 20, B 2, C 12, D 6, E 6, F…I 2 each.
    //   pairs held (halved): rank 0 10 + 4 = 14, rank 1 1 + 6 + 3 + 3 = 13 → 14/13.5
    //   contiguous, true order: rank 0 A B C = 34, rank 1 D…I = 20 → 34/27
    //     (in the wrong order: A F G H I = 28 vs 26 → 28/27)
    //   zigzag: 28 vs 26 → 28/27
    //   per-doc, 4 slots, rotation from 0: A 1 token a slot → 10 each; B slot 0 → r0 2;
    //   C slots 1 2 3 → r1 2 + 4, r0 6; D slots 0 1 → r0 2, r1 4; E slots 2 3 → r1 2, r0 4;
    //   F G H I slots 0 1 2 3 → r0 2 + 2, r1 2 + 2. r0 = 28, r1 = 26 → 28/27
    void zigzagRunIsReadInPackedOrder() {
        RunTrace trace;
        trace.run.config_json = R"({"cp_shard":"zigzag"})";
        add_rank(trace, 0, 0, 0, 0, 0);
        add_rank(trace, 1, 0, 0, 0, 1);
        const int lengths[] = {4, 1, 3, 2, 2, 1, 1, 1, 1};  // ids 0 … 8 = A … I
        for (const int id : {0, 5, 6, 7, 8}) {
            row(trace, 0, 0, 0, id, lengths[id], 0, lengths[id]);
        }
        for (const int id : {1, 2, 3, 4}) {
            row(trace, 1, 0, 0, id, lengths[id], 0, lengths[id]);
        }
        pass_with_attention(trace, 0, 0, 0, 0, Phase::forward, 8'000);
        pass_with_attention(trace, 1, 0, 0, 0, Phase::forward, 10'000);
        trace.finish();
        const auto analysis = analyze_cp_load(trace, find_passes(trace));
        QCOMPARE(analysis.groups.size(), 1u);
        const CpGroupLoad& group = analysis.groups[0];
        QCOMPARE(group.measured_imbalance.value(), 10.0 / 9);
        QCOMPARE(group.predicted_imbalance.value(), 14.0 / 13.5);
        QCOMPARE(predicted_for(group, "contiguous"), 34.0 / 27);
        QCOMPARE(predicted_for(group, "zigzag"), 28.0 / 27);
        QCOMPARE(predicted_for(group, "per-doc"), 28.0 / 27);
    }

    // Rows made by core/balance/cp_shard itself for a run of many micro-batches: the
    // alternative equal to the sharding the run used must predict exactly the run's own
    // imbalance of held pairs — which holds only if the packed order (and, for per-doc, the
    // leftover rotation carried across micro-batches in step, replica, micro-batch order) is
    // rebuilt right. Lengths mix long documents with isolated short ones (< 2·CP tokens, which
    // per-doc gives to only some ranks).
    void runShardingIsReproduced_data() {
        QTest::addColumn<balance::CpSharding>("sharding");
        QTest::addColumn<int>("cp");
        for (const int cp : {2, 4}) {
            for (const auto sharding :
                 {balance::CpSharding::contiguous, balance::CpSharding::zigzag,
                  balance::CpSharding::per_document}) {
                const std::string tag =
                    std::string(balance::cp_sharding_name(sharding)) + " cp" + std::to_string(cp);
                QTest::newRow(tag.c_str()) << sharding << cp;
            }
        }
    }

    void runShardingIsReproduced() {
        QFETCH(balance::CpSharding, sharding);
        QFETCH(int, cp);
        RunTrace trace;
        trace.run.config_json =
            std::string(R"({"cp_shard":")") + balance::cp_sharding_name(sharding) + "\"}";
        constexpr int kReplicas = 2, kSteps = 2, kMicrobatches = 3;
        for (int dp = 0; dp < kReplicas; ++dp) {
            for (int c = 0; c < cp; ++c) {
                add_rank(trace, dp * cp + c, dp, 0, 0, c);
            }
        }
        std::uint64_t seed = 12345, next_id = 0;
        auto next = [&seed](int range) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            return static_cast<int>((seed >> 33) % static_cast<std::uint64_t>(range));
        };
        balance::CpShardingState state;  // the engine's: one rotation over the whole run
        for (int step = 0; step < kSteps; ++step) {
            for (int dp = 0; dp < kReplicas; ++dp) {
                for (int mb = 0; mb < kMicrobatches; ++mb) {
                    std::vector<balance::Document> documents;
                    const int count = 3 + next(6);
                    for (int i = 0; i < count; ++i) {
                        const bool tiny = i % 2 == 1 && next(3) == 0;
                        const int length = tiny ? 1 + next(2 * cp - 1) : 2 * cp + next(300);
                        documents.push_back({next_id++, length});
                    }
                    auto plan = balance::shard_microbatch(documents, cp, sharding, state);
                    QVERIFY(plan.ok());
                    for (int c = 0; c < cp; ++c) {
                        for (const auto& range : plan->ranks[static_cast<std::size_t>(c)].ranges) {
                            std::int32_t length = 0;
                            for (const auto& d : documents) {
                                if (d.id == range.document_id) {
                                    length = static_cast<std::int32_t>(d.length);
                                }
                            }
                            row(trace, dp * cp + c, step, mb,
                                static_cast<std::int64_t>(range.document_id), length,
                                static_cast<int>(range.begin), static_cast<int>(range.end));
                        }
                    }
                }
            }
        }
        trace.finish();
        const auto analysis = analyze_cp_load(trace, find_passes(trace));
        QCOMPARE(analysis.cp.value(), cp);
        QCOMPARE(int(analysis.groups.size()), kSteps * kReplicas * kMicrobatches);

        // The same run read from its file (issue 37): the rows are never held, only summed in
        // one scan and read back a step at a time; every figure as from the rows in memory.
        QTemporaryDir dir;
        const std::string path = write_workload_file(dir, trace);
        QVERIFY(!path.empty());
        auto reader = store::TraceReader::open(path);
        QVERIFY(reader.ok());
        auto from_file = WorkloadByRank::of(*reader);
        QVERIFY2(from_file.ok(), from_file.ok() ? "" : from_file.error().message.c_str());
        auto rows = reader->workload();
        QVERIFY(rows.ok());
        RunTrace loaded = trace;
        loaded.workload = std::move(*rows);  // sorted, as load_run_trace holds them
        const WorkloadByRank in_memory = WorkloadByRank::of(loaded);
        QVERIFY(same_held(from_file->held, in_memory.held));
        QVERIFY(same_held(from_file->held, held_work(trace)));
        for (int step = 0; step <= kSteps; ++step) {  // kSteps has no rows
            auto file_rows = from_file->step_rows(step);
            auto memory_rows = in_memory.step_rows(step);
            QVERIFY(file_rows.ok() && memory_rows.ok());
            QCOMPARE(file_rows->empty(), step == kSteps);
            QVERIFY2(same_rows(*file_rows, *memory_rows), qPrintable(QString("step %1").arg(step)));
        }
        const auto streamed =
            analyze_cp_load(trace, measured_attention(trace, find_passes(trace)), *from_file);
        QVERIFY(streamed.ok());
        QCOMPARE(streamed->groups.size(), analysis.groups.size());
        for (std::size_t g = 0; g < analysis.groups.size(); ++g) {
            QCOMPARE(streamed->groups[g].predicted_by_sharding.named(),
                     analysis.groups[g].predicted_by_sharding.named());
            QCOMPARE(streamed->groups[g].predicted_imbalance,
                     analysis.groups[g].predicted_imbalance);
        }
        QCOMPARE(streamed->mean_predicted_by_sharding, analysis.mean_predicted_by_sharding);
        // The predictions tell their progress a step at a time, and stop when told to.
        std::vector<double> told;
        const auto counted = analyze_cp_load(trace, measured_attention(trace, find_passes(trace)),
                                             *from_file, [&](double f) {
                                                 told.push_back(f);
                                                 return Status{};
                                             });
        QVERIFY(counted.ok());
        QCOMPARE(told, (std::vector<double>{0.5, 1.0}));  // kSteps steps have groups
        const auto stopped = analyze_cp_load(
            trace, measured_attention(trace, find_passes(trace)), *from_file, [](double) {
                return Status(Error{ErrorCode::cancelled, "the analysis was cancelled"});
            });
        QVERIFY(!stopped.ok());
        QCOMPARE(int(stopped.error().code), int(ErrorCode::cancelled));
        const std::string name = balance::cp_sharding_name(sharding);
        for (const CpGroupLoad& group : analysis.groups) {
            QCOMPARE(int(group.ranks.size()), cp);
            QVERIFY(!group.measured_imbalance);  // no passes: nothing measured, no figure
            for (const CpRankLoad& rank : group.ranks) {
                QVERIFY(!rank.attention_ns);
            }
            QVERIFY(group.predicted_imbalance);
            QVERIFY2(qFuzzyCompare(predicted_for(group, name), *group.predicted_imbalance),
                     qPrintable(QString("step %1 dp %2 mb %3: %4 predicted %5, run %6")
                                    .arg(group.step)
                                    .arg(group.dp)
                                    .arg(group.microbatch)
                                    .arg(name.c_str())
                                    .arg(predicted_for(group, name))
                                    .arg(*group.predicted_imbalance)));
        }
    }

    // What CP load measures of the passes: one time a (rank, step, micro-batch), its passes'
    // attention summed, for the ranks in the CP grid only, ascending.
    void measuredAttentionSumsEachRanksMicroBatch() {
        RunTrace trace;
        add_rank(trace, 0, 0, 0, 0, 0);
        add_rank(trace, 1, 0, 0, 0, 1);
        add_rank(trace, 2, 0, 0, 0, -1);  // no CP coordinate: in no group
        pass_with_attention(trace, 1, 0, 0, 0, Phase::forward, 30);
        pass_with_attention(trace, 1, 2000, 0, 0, Phase::backward, 70);
        pass_with_attention(trace, 0, 0, 0, 1, Phase::forward, 5);
        pass_with_attention(trace, 0, 2000, 0, 0, Phase::forward, 10);
        pass_with_attention(trace, 2, 0, 0, 0, Phase::forward, 99);
        trace.finish();
        QVERIFY(trace.config.grid_known);
        QCOMPARE(trace.config.layout.grid.cp, 2);
        const MeasuredAttention measured = measured_attention(trace, find_passes(trace));
        using Key = MeasuredAttention::Key;
        const std::vector<std::pair<Key, std::int64_t>> expected = {
            {Key{0, 0, 0}, 10}, {Key{0, 0, 1}, 5}, {Key{1, 0, 0}, 100}};
        QCOMPARE(measured.ns, expected);
        trace.config.layout.grid.cp = 1;
        QVERIFY(measured_attention(trace, find_passes(trace)).ns.empty());
    }

    // cp = 1: no CP groups at all.
    void noGroupsWithoutContextParallelism() {
        RunTrace trace;
        add_rank(trace, 0, 0, 0, 0, 0);
        add_rank(trace, 1, 1, 0, 0, 0);
        pass_with_attention(trace, 0, 0, 0, 0, Phase::forward, 100);
        pass_with_attention(trace, 1, 0, 0, 0, Phase::forward, 300);
        row(trace, 0, 0, 0, 1, 10, 0, 10);
        trace.finish();
        const auto analysis = analyze_cp_load(trace, find_passes(trace));
        QCOMPARE(analysis.cp.value(), 1);
        QVERIFY(analysis.groups.empty());
        QVERIFY(!analysis.mean_measured_imbalance);
        QVERIFY(!analysis.mean_predicted_imbalance);
    }
};

QTEST_GUILESS_MAIN(CpLoadTest)
#include "test_analysis_cp_load.moc"
