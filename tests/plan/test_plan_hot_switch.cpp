// HotSPa's switch planner on layouts small enough to work out by hand: who sends what to whom
// when a step switches from one layout to another over the same ranks.
#include <QTest>

#include "core/parallel/hot_switch_spec.h"
#include "core/parallel/switch_plan.h"

using namespace fulcrum;
using namespace fulcrum::parallel;
using parallel::GridShape;

namespace {

SwitchModel model(int layers) {
    SwitchModel m;
    m.layers = layers;
    m.layer_bytes = 1000;
    return m;
}

}  // namespace

class HotSwitchTest : public QObject {
    Q_OBJECT

private slots:
    // DP holds everything everywhere: switching to TP moves nothing.
    void dataParallelHoldsEverything() {
        const SwitchPlan plan = plan_switch(model(4), GridShape{.dp = 4}, GridShape{.tp = 4}, 8);
        QVERIFY(plan.transfers.empty());
        QCOMPARE(plan.total_bytes, 0.0);
    }

    // TP 4 → DP 4, 2 layers of 1000 bytes: rank k holds quarter k of each layer and needs the
    // other three; each quarter goes from its only owner to 3 ranks: 3 · 250 · 2 = 1500 sent
    // and received by every rank, 6000 in all.
    void tensorToDataParallel() {
        const SwitchPlan plan = plan_switch(model(2), GridShape{.tp = 4}, GridShape{.dp = 4}, 8);
        QCOMPARE(plan.transfers.size(), std::size_t(2 * 4 * 3));
        for (int r = 0; r < 4; ++r) {
            QCOMPARE(plan.sent[r], 1500.0);
            QCOMPARE(plan.received[r], 1500.0);
        }
        QCOMPARE(plan.total_bytes, 6000.0);
        QCOMPARE(plan.largest_send_bytes, 1500.0);
        QCOMPARE(plan.inter_node_bytes, 0.0);
    }

    // PP 2 → DP 2, 4 layers: rank 0 holds layers 0–1 and rank 1 layers 2–3; each sends its two
    // layers to the other: 2000 each way.
    void pipelineToDataParallel() {
        const SwitchPlan plan = plan_switch(model(4), GridShape{.pp = 2}, GridShape{.dp = 2}, 8);
        QCOMPARE(plan.sent[0], 2000.0);
        QCOMPARE(plan.sent[1], 2000.0);
        for (const SwitchTransfer& t : plan.transfers)
            QCOMPARE(t.source, t.unit < 2 ? 0 : 1);
    }

    // DP 2 × TP 2 → TP 4 on one layer. Ranks (TP fastest): 0 (dp0 tp0), 1 (dp0 tp1), 2 (dp1 tp0),
    // 3 (dp1 tp1); under TP 4 rank r needs quarter r. Quarter 0 is rank 0's already; quarter 1
    // (in TP slice 0, held by 0 and 2) goes to rank 1; quarter 2 (slice 1: ranks 1 and 3) to
    // rank 2; quarter 3 is rank 3's already. On one node of 4, rank 1 gets it from rank 0 (both
    // have sent nothing: the first owner), rank 2 from rank 1. On nodes of 2 (0–1, 2–3) rank 2
    // takes it from rank 3, on its own node.
    void preferTheOwnerOnTheSameNode() {
        const SwitchPlan one_node =
            plan_switch(model(1), GridShape{.dp = 2, .tp = 2}, GridShape{.tp = 4}, 4);
        QCOMPARE(one_node.transfers.size(), std::size_t(2));
        QCOMPARE(one_node.transfers[0].destination, 1);
        QCOMPARE(one_node.transfers[0].source, 0);
        QCOMPARE(one_node.transfers[1].destination, 2);
        QCOMPARE(one_node.transfers[1].source, 1);
        QCOMPARE(one_node.transfers[1].bytes, 250.0);
        const SwitchPlan two_nodes =
            plan_switch(model(1), GridShape{.dp = 2, .tp = 2}, GridShape{.tp = 4}, 2);
        QCOMPARE(two_nodes.transfers[1].destination, 2);
        QCOMPARE(two_nodes.transfers[1].source, 3);
        QCOMPARE(two_nodes.inter_node_bytes, 0.0);
    }

    // DP 2 × TP 2 → DP 4, 2 layers: each half of a layer has two owners (its TP slice on both
    // DP replicas) and two ranks that lack it. Each rank receives the half it lacks of both
    // layers, 2 × 500 = 1000, 4000 in all; picking the owner that has sent least spreads the
    // sends to 1000 a rank.
    void sendsSpreadOverOwners() {
        const SwitchPlan plan =
            plan_switch(model(2), GridShape{.dp = 2, .tp = 2}, GridShape{.dp = 4}, 8);
        QCOMPARE(plan.total_bytes, 4000.0);
        for (int r = 0; r < 4; ++r)
            QCOMPARE(plan.sent[r], 1000.0);
    }

    // The example: three buckets over 4 ranks, missing degrees 1, and back to text.
    void specParses() {
        auto spec = parse_hot_switch_spec("0-2048:dp4;2048-8192:dp2,tp2;8192-:cp2,pp2",
                                          {.world = 4, .heads = 8, .layers = 4});
        QVERIFY2(spec.ok(), spec.ok() ? "" : spec.error().message.c_str());
        QCOMPARE(spec->buckets.size(), std::size_t(3));
        QCOMPARE(spec->buckets[0].layout, (GridShape{.dp = 4}));
        QCOMPARE(spec->buckets[1].layout, (GridShape{.dp = 2, .tp = 2}));
        QCOMPARE(spec->buckets[2].layout, (GridShape{.pp = 2, .cp = 2}));
        QCOMPARE(spec->buckets[1].min_length, std::int64_t(2048));
        QCOMPARE(spec->buckets[1].max_length, std::int64_t(8192));
        QCOMPARE(spec->buckets[2].max_length, std::int64_t(-1));
        QCOMPARE(bucket_of(*spec, 2047), 0);
        QCOMPARE(bucket_of(*spec, 2048), 1);
        QCOMPARE(bucket_of(*spec, 1 << 20), 2);
        QCOMPARE(hot_switch_spec_string(*spec),
                 std::string("0-2048:dp4;2048-8192:dp2,tp2;8192-:pp2,cp2"));
    }

    // Every bad spec fails with one message naming the bucket and the problem.
    void specErrors_data() {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<QString>("problem");
        QTest::newRow("gap") << "0-1024:dp4;2048-:tp4"
                             << "leaving a gap";
        QTest::newRow("overlap") << "0-2048:dp4;1024-:tp4"
                                 << "overlapping";
        QTest::newRow("not from 0") << "16-:dp4"
                                    << "must start at 0";
        QTest::newRow("closed end") << "0-1024:dp4;1024-4096:tp4"
                                    << "must be open-ended";
        QTest::newRow("open middle") << "0-:dp4;1024-:tp4"
                                     << "only the last bucket";
        QTest::newRow("world") << "0-1024:dp4;1024-:tp2"
                               << "the world of 4";
        QTest::newRow("heads") << "0-:tp4"
                               << "does not divide the 6 heads";
        QTest::newRow("layers") << "0-:pp4"
                                << "exceeds the 2 layers";
        QTest::newRow("degree") << "0-:xp4"
                                << "is not a degree";
        QTest::newRow("twice") << "0-:dp2,dp2"
                               << "named twice";
        QTest::newRow("syntax") << "0:dp4"
                                << "is not LO-HI:LAYOUT";
        QTest::newRow("empty bucket") << "0-0:dp4;0-:dp4"
                                      << "HI must exceed LO";
        QTest::newRow("nothing") << ""
                                 << "no bucket";
    }
    void specErrors() {
        QFETCH(QString, spec);
        QFETCH(QString, problem);
        auto parsed =
            parse_hot_switch_spec(spec.toStdString(), {.world = 4, .heads = 6, .layers = 2});
        QVERIFY(!parsed.ok());
        QCOMPARE(parsed.error().code, ErrorCode::invalid_input);
        QVERIFY2(parsed.error().message.find(problem.toStdString()) != std::string::npos,
                 parsed.error().message.c_str());
    }
};

QTEST_GUILESS_MAIN(HotSwitchTest)
#include "test_plan_hot_switch.moc"
