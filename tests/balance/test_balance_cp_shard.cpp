// Context-parallel sharding: hand-worked plans for CP = 2 over documents [5, 8], and every
// token of every document on exactly one rank for every strategy and CP size.
#include "core/balance/cp_shard.h"
#include "core/balance/lengths.h"

#include <QTest>

#include <algorithm>
#include <map>

using namespace fulcrum;
using namespace fulcrum::balance;

Q_DECLARE_METATYPE(fulcrum::balance::CpSharding)

namespace {

using Ranges = std::vector<TokenRange>;

// Documents [5, 8] with ids 0 and 1: short enough to work by hand, neither a multiple of 4.
const std::vector<Document> kFiveAndEight{{0, 5}, {1, 8}};

CpPlan shard(std::span<const Document> documents, int cp, CpSharding sharding,
             CpShardingState& state) {
    auto plan = shard_microbatch(documents, cp, sharding, state);
    if (!plan) {
        qFatal("%s", plan.error().message.c_str());
    }
    return std::move(plan).value();
}

CpPlan shard(std::span<const Document> documents, int cp, CpSharding sharding) {
    CpShardingState state;
    return shard(documents, cp, sharding, state);
}

std::vector<Document> long_tail_microbatch(std::uint64_t seed, std::int64_t capacity) {
    auto distribution = parse_length_spec("long-tail:context=" + std::to_string(capacity));
    auto lengths = sample_lengths(*distribution, 400, seed, capacity);
    std::vector<Document> documents;
    std::int64_t tokens = 0;
    for (std::size_t i = 0; i < lengths->size() && tokens + (*lengths)[i] <= capacity; ++i) {
        documents.push_back(Document{i, (*lengths)[i]});
        tokens += (*lengths)[i];
    }
    return documents;
}

}  // namespace

class TestBalanceCpShard : public QObject {
    Q_OBJECT

private slots:
    // Per-doc, CP = 2, four chunk slots. Document 0 (d = 5): one leftover token goes to slot 0
    // → chunks [0,2) [2,3) [3,4) [4,5); the rotating slot moves to 1. Document 1 (d = 8)
    // divides evenly → [0,2) [2,4) [4,6) [6,8). Rank 0 takes slots 0 and 3, rank 1 slots 1, 2.
    // Costs (2p+1+ℓ)·ℓ: rank 0 = 6 + 10 + 6 + 30 = 52; rank 1 = 6 + 8 + 14 + 22 = 50.
    void perDocumentHandWorked() {
        CpShardingState state;
        const auto plan = shard(kFiveAndEight, 2, CpSharding::per_document, state);
        QCOMPARE(plan.sharding, CpSharding::per_document);
        QCOMPARE(plan.ranks.size(), std::size_t{2});
        QCOMPARE(plan.ranks[0].ranges, (Ranges{{0, 0, 2}, {0, 4, 5}, {1, 0, 2}, {1, 6, 8}}));
        QCOMPARE(plan.ranks[1].ranges, (Ranges{{0, 2, 3}, {0, 3, 4}, {1, 2, 4}, {1, 4, 6}}));
        QCOMPARE(plan.ranks[0].attention_work, std::int64_t{52});
        QCOMPARE(plan.ranks[1].attention_work, std::int64_t{50});
        QCOMPARE(plan.ranks[0].tokens, std::int64_t{7});
        QCOMPARE(plan.ranks[1].tokens, std::int64_t{6});
        QCOMPARE(state.next_leftover_slot, 1);
    }

    // Zigzag, CP = 2: the packed 13 tokens cut at ⌊k·13/4⌋ = 0, 3, 6, 9, 13. Rank 0 takes
    // [0,3) and [9,13) = doc 0 [0,3) and doc 1 [4,8): 12 + 52 = 64. Rank 1 takes [3,6) and
    // [6,9) = doc 0 [3,5), doc 1 [0,1), doc 1 [1,4): 18 + 2 + 18 = 38.
    void zigzagHandWorked() {
        const auto plan = shard(kFiveAndEight, 2, CpSharding::zigzag);
        QCOMPARE(plan.ranks[0].ranges, (Ranges{{0, 0, 3}, {1, 4, 8}}));
        QCOMPARE(plan.ranks[1].ranges, (Ranges{{0, 3, 5}, {1, 0, 1}, {1, 1, 4}}));
        QCOMPARE(plan.ranks[0].attention_work, std::int64_t{64});
        QCOMPARE(plan.ranks[1].attention_work, std::int64_t{38});
    }

    // Contiguous, CP = 2: cut at ⌊13/2⌋ = 6. Rank 0: doc 0 whole (30) + doc 1 [0,1) (2) = 32;
    // rank 1: doc 1 [1,8) = (2+1+7)·7 = 70.
    void contiguousHandWorked() {
        const auto plan = shard(kFiveAndEight, 2, CpSharding::contiguous);
        QCOMPARE(plan.ranks[0].ranges, (Ranges{{0, 0, 5}, {1, 0, 1}}));
        QCOMPARE(plan.ranks[1].ranges, (Ranges{{1, 1, 8}}));
        QCOMPARE(plan.ranks[0].attention_work, std::int64_t{32});
        QCOMPARE(plan.ranks[1].attention_work, std::int64_t{70});
    }

    // Chunked, CP = 2, chunks of 6 over the packed 13 tokens: [0,6) [6,12) [12,13), each cut
    // at ⌊r·L/2⌋ → rank 0 takes [0,3) [6,9) [12,12), rank 1 [3,6) [9,12) [12,13). In the
    // documents (doc 0 is packed [0,5), doc 1 [5,13)): rank 0 doc 0 [0,3), doc 1 [1,4); rank 1
    // doc 0 [3,5), doc 1 [0,1), [4,7), [7,8). Work: rank 0 12 + 18 = 30; rank 1 18 + 2 + 36 +
    // 16 = 72.
    void chunkedHandWorked() {
        CpShardingState state;
        state.chunk = 6;
        const auto plan = shard(kFiveAndEight, 2, CpSharding::chunked, state);
        QCOMPARE(plan.sharding, CpSharding::chunked);
        QCOMPARE(plan.ranks[0].ranges, (Ranges{{0, 0, 3}, {1, 1, 4}}));
        QCOMPARE(plan.ranks[1].ranges, (Ranges{{0, 3, 5}, {1, 0, 1}, {1, 4, 7}, {1, 7, 8}}));
        QCOMPARE(plan.ranks[0].attention_work, std::int64_t{30});
        QCOMPARE(plan.ranks[1].attention_work, std::int64_t{72});
        state.chunk = 0;
        const auto without = shard_microbatch(kFiveAndEight, 2, CpSharding::chunked, state);
        QVERIFY(!without.ok());
        QVERIFY(QString::fromStdString(without.error().message).contains("--attention-chunk"));
    }

    void adaptivePicksTheLowerMaximum() {
        // [5, 8]: per-doc 52 beats zigzag 64.
        CpShardingState state;
        const auto packed = shard(kFiveAndEight, 2, CpSharding::adaptive, state);
        QCOMPARE(packed.sharding, CpSharding::per_document);
        QCOMPARE(packed.max_attention_work(), std::int64_t{52});
        QCOMPARE(state.next_leftover_slot, 1);

        // One document of 16: both cut the same chunks; the tie goes to zigzag and the
        // per-doc rotation is left where it was.
        CpShardingState untouched{3};
        const auto single =
            shard(std::vector<Document>{{9, 16}}, 2, CpSharding::adaptive, untouched);
        QCOMPARE(single.sharding, CpSharding::zigzag);
        QCOMPARE(untouched.next_leftover_slot, 3);
    }

    // Four documents of 5 tokens, CP = 2: the leftover token lands in slots 0, 1, 2, 3 in turn
    // (ranks 0, 1, 1, 0), so both ranks end with 10 tokens instead of rank 0 taking all four.
    void leftoverTokensRotateAcrossDocuments() {
        const std::vector<Document> documents{{0, 5}, {1, 5}, {2, 5}, {3, 5}};
        CpShardingState state;
        const auto plan = shard(documents, 2, CpSharding::per_document, state);
        QCOMPARE(plan.ranks[0].tokens, std::int64_t{10});
        QCOMPARE(plan.ranks[1].tokens, std::int64_t{10});
        QCOMPARE(state.next_leftover_slot, 0);
    }

    void everyTokenOnExactlyOneRank_data() {
        QTest::addColumn<CpSharding>("sharding");
        QTest::addColumn<int>("cp");
        for (const auto sharding :
             {CpSharding::contiguous, CpSharding::zigzag, CpSharding::per_document,
              CpSharding::chunked, CpSharding::adaptive}) {
            for (const int cp : {1, 2, 3, 4, 8}) {
                // clang-format off
                QTest::newRow(qPrintable(QString("%1 cp=%2").arg(cp_sharding_name(sharding)).arg(cp)))
                    << sharding << cp;
                // clang-format on
            }
        }
    }
    void everyTokenOnExactlyOneRank() {
        QFETCH(CpSharding, sharding);
        QFETCH(int, cp);
        CpShardingState state;
        state.chunk = 1000;  // chunked's: chunks that divide nothing here
        for (std::uint64_t seed = 1; seed <= 20; ++seed) {
            // Long-tailed lengths plus the awkward ones: 1 token, fewer than 2·CP, odd.
            auto documents = long_tail_microbatch(seed, 32768);
            documents.push_back(Document{1000, 1});
            documents.push_back(Document{1001, 2 * cp - 1});
            documents.push_back(Document{1002, 2 * cp + 1});
            const auto plan = shard(documents, cp, sharding, state);
            QCOMPARE(plan.ranks.size(), static_cast<std::size_t>(cp));

            std::map<std::uint64_t, std::vector<std::pair<std::int64_t, std::int64_t>>> covered;
            std::int64_t work = 0;
            for (const auto& rank : plan.ranks) {
                std::int64_t rank_work = 0;
                for (const auto& range : rank.ranges) {
                    QVERIFY(range.begin < range.end);
                    covered[range.document_id].emplace_back(range.begin, range.end);
                    rank_work += causal_pair_work(range.begin, range.end - range.begin);
                }
                QCOMPARE(rank.attention_work, rank_work);
                work += rank_work;
            }
            std::int64_t expected_work = 0;
            for (const auto& document : documents) {
                auto& pieces = covered[document.id];
                std::sort(pieces.begin(), pieces.end());
                std::int64_t next = 0;
                for (const auto& [begin, end] : pieces) {
                    QCOMPARE(begin, next);  // no gap, no overlap
                    next = end;
                }
                QCOMPARE(next, document.length);
                expected_work += document.length * document.length + document.length;
            }
            QCOMPARE(covered.size(), documents.size());
            QCOMPARE(work, expected_work);
        }
    }

    // On packed long-tailed micro-batches per-doc balances the attention work across ranks
    // better than zigzag, which only balances a single document (WLB-LLM §3–4; docs/sources.md,
    // "Workload balancing"); adaptive is never worse than either.
    void perDocumentBeatsZigzagOnPackedBatches() {
        double zigzag_excess = 0;
        double per_document_excess = 0;
        for (std::uint64_t seed = 1; seed <= 30; ++seed) {
            const auto documents = long_tail_microbatch(seed, 65536);
            const auto zigzag = shard(documents, 4, CpSharding::zigzag);
            const auto per_document = shard(documents, 4, CpSharding::per_document);
            const auto adaptive = shard(documents, 4, CpSharding::adaptive);
            QVERIFY(adaptive.max_attention_work() <=
                    std::min(zigzag.max_attention_work(), per_document.max_attention_work()));
            std::int64_t total = 0;
            for (const auto& rank : zigzag.ranks) {
                total += rank.attention_work;
            }
            const double mean = static_cast<double>(total) / 4.0;
            zigzag_excess += static_cast<double>(zigzag.max_attention_work()) / mean - 1.0;
            per_document_excess +=
                static_cast<double>(per_document.max_attention_work()) / mean - 1.0;
        }
        QVERIFY2(per_document_excess < 0.5 * zigzag_excess,
                 qPrintable(
                     QString("per-doc %1, zigzag %2").arg(per_document_excess).arg(zigzag_excess)));
    }

    // Adaptive weighs the kernel: one document of 200 and twenty of 16 over 2 CP ranks. By
    // work alone per-doc balances better (zigzag leaves the tail of the long document on
    // rank 1); a kernel of 64-row query tiles runs per-doc's 4-token slivers of the short
    // documents as whole tiles, so there zigzag's few long ranges are faster.
    void adaptiveWeighsTheKernel() {
        std::vector<Document> documents{{0, 200}};
        for (std::uint64_t id = 1; id <= 20; ++id) {
            documents.push_back({id, 16});
        }
        const auto choose = [&](std::string_view kernel) {
            CpShardingState state;
            auto plan = shard_microbatch(documents, 2, CpSharding::adaptive, state,
                                         *attention_kernel_model(kernel));
            return plan->sharding;
        };
        QCOMPARE(choose("ideal"), CpSharding::per_document);
        QCOMPARE(choose("cpu"), CpSharding::per_document);
        QCOMPARE(choose("cuda"), CpSharding::zigzag);

        const AttentionKernelModel cuda = *attention_kernel_model("cuda");
        // 4 rows at prefix 12 take a whole 64-row tile: (2·12 + 1 + 64)·64 pairs.
        QCOMPARE(cuda.range_time(12, 4), double((2 * 12 + 1 + 64) * 64));
        QCOMPARE(attention_kernel_model("ideal")->range_time(12, 4),
                 double(causal_pair_work(12, 4)));
        QVERIFY(!attention_kernel_model("tpu").ok());
    }

    void badInputsAreErrors() {
        CpShardingState state;
        const auto zero = shard_microbatch(kFiveAndEight, 0, CpSharding::zigzag, state);
        QVERIFY(!zero.ok());
        QVERIFY(
            QString::fromStdString(zero.error().message).contains("CP size must be at least 1"));
        const auto unknown = parse_cp_sharding("ring");
        QVERIFY(!unknown.ok());
        QVERIFY(QString::fromStdString(unknown.error().message)
                    .contains("expected contiguous, zigzag, per-doc, chunked or adaptive"));
        QCOMPARE(*parse_cp_sharding("per-doc"), CpSharding::per_document);
    }
};

QTEST_GUILESS_MAIN(TestBalanceCpShard)
#include "test_balance_cp_shard.moc"
