// Ranks on nodes (core/parallel/placement.h): the orders frameworks number ranks in, and which
// groups leave a node, over how many nodes, with how many others leaving it at once.
#include <QTest>

#include "core/parallel/placement.h"

using namespace fulcrum;
using namespace fulcrum::parallel;

class TestPlacement : public QObject {
    Q_OBJECT
private slots:
    void ordersReadAndWrite() {
        auto megatron = parse_rank_order("tp-cp-dp-pp");
        QVERIFY(megatron);
        QVERIFY(*megatron == kMegatronOrder);
        QCOMPARE(rank_order_name(kFulcrumOrder), std::string("tp-cp-pp-dp"));
        for (const char* bad : {"tp-cp-dp", "tp-cp-dp-pp-ep", "tp-tp-dp-pp", "tp-cp-dp-xx", ""}) {
            auto order = parse_rank_order(bad);
            QVERIFY2(!order, bad);
            QVERIFY(order.error().message.find("--rank-order") != std::string::npos);
        }
    }

    // fulcrum-train's order is grid.h's numbering, rank for rank.
    void fulcrumOrderIsTheEngines() {
        const GridShape grid{.dp = 2, .tp = 2, .pp = 3, .cp = 2};
        for (int rank = 0; rank < grid.world(); ++rank) {
            QCOMPARE(rank_in_order(grid, kFulcrumOrder, coordinates_of(grid, rank)), rank);
        }
        // Megatron-LM's puts DP inside PP: the second DP replica is the next block of tp·cp.
        QCOMPARE(rank_in_order(grid, kMegatronOrder, {.dp = 1}), 4);
        QCOMPARE(rank_in_order(grid, kMegatronOrder, {.pp = 1}), 8);
    }

    // 128 GPUs on 8-GPU nodes, TP 8 × DP 16: each TP group is a node; each DP group has one
    // rank on each of 16 nodes, and the node's 8 DP groups reduce at once.
    void tpInsideDpAcross() {
        const GridShape grid{.dp = 16, .tp = 8};
        const GroupPlacement tp = place_group(grid, kMegatronOrder, {Dimension::tp}, 8);
        QCOMPARE(tp, (GroupPlacement{
                         .ranks = 8, .nodes = 1, .ranks_per_node = 8, .groups_per_node = 1}));
        QVERIFY(!tp.leaves_node());
        const GroupPlacement dp = place_group(grid, kMegatronOrder, {Dimension::dp}, 8);
        QCOMPARE(dp, (GroupPlacement{
                         .ranks = 16, .nodes = 16, .ranks_per_node = 1, .groups_per_node = 8}));
    }

    // A TP group of 16 spans two nodes and is the only group leaving each of them; pure data
    // parallelism over 64 GPUs is one group over 8 nodes.
    void loneGroupsAcrossNodes() {
        const GroupPlacement tp16 =
            place_group({.dp = 2, .tp = 16}, kMegatronOrder, {Dimension::tp}, 8);
        QCOMPARE(tp16, (GroupPlacement{
                           .ranks = 16, .nodes = 2, .ranks_per_node = 8, .groups_per_node = 1}));
        const GroupPlacement dp64 = place_group({.dp = 64}, kMegatronOrder, {Dimension::dp}, 8);
        QCOMPARE(dp64, (GroupPlacement{
                           .ranks = 64, .nodes = 8, .ranks_per_node = 8, .groups_per_node = 1}));
        // The gradient reduction over DP × CP with TP 2 × CP 2 inside a node: 2 groups a node.
        const GroupPlacement dp_cp = place_group({.dp = 8, .tp = 2, .cp = 2}, kMegatronOrder,
                                                 {Dimension::dp, Dimension::cp}, 8);
        QCOMPARE(dp_cp, (GroupPlacement{
                            .ranks = 16, .nodes = 4, .ranks_per_node = 4, .groups_per_node = 2}));
    }

    // The order decides where a stage boundary falls: fulcrum-train's puts the next stage in
    // the node (PP inside DP), Megatron-LM's puts it on the next node, where all four ranks of
    // the node send at once.
    void pipelineSendsFollowTheOrder() {
        const GridShape grid{.dp = 2, .tp = 2, .pp = 2};
        const GroupPlacement inside = place_pipeline_pair(grid, kFulcrumOrder, 4);
        QVERIFY(!inside.leaves_node());
        const GroupPlacement across = place_pipeline_pair(grid, kMegatronOrder, 4);
        QCOMPARE(across, (GroupPlacement{
                             .ranks = 2, .nodes = 2, .ranks_per_node = 1, .groups_per_node = 4}));
        QCOMPARE(place_pipeline_pair({.dp = 8}, kMegatronOrder, 4).ranks, 1);  // no pipeline
    }
};

QTEST_GUILESS_MAIN(TestPlacement)
#include "test_placement.moc"
