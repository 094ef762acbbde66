// NCCL's tuning model (core/parallel/nccl_model.h) against NCCL 2.30.7's own code: the
// expected times are what NCCL's ncclTopoGetAlgoTime printed, linked against NCCL's host
// objects, for DGX A100 and DGX H100 topologies (one node and two; docs/simulate.md), and the
// algorithm and protocol its tuner chose. Then what placement does to a group's network share.
#include <QTest>

#include <cmath>

#include "core/parallel/nccl_model.h"

using namespace fulcrum;
using namespace fulcrum::parallel;

namespace {

// The presets' links (DGX A100: 12 × 20 GB/s NVLink, 8 HDR NICs behind PCIe Gen4, AMD; DGX
// H100: 18 × 20.6 with NVLS, 8 NDR NICs behind Gen5, Intel): the topologies NCCL was run on.
const ClusterNetwork& kDgxA100 = kDgxA100Network;
const ClusterNetwork& kDgxH100 = kDgxH100Network;

constexpr GroupPlacement kOneNode{.ranks = 8, .nodes = 1, .ranks_per_node = 8};
constexpr GroupPlacement kTwoNodes{.ranks = 16, .nodes = 2, .ranks_per_node = 8};

constexpr double kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;

struct Expected {
    double bytes;
    NcclAlgorithm algorithm;
    NcclProtocol protocol;
    double time_us;
};

void expect(const GroupPlacement& group, const ClusterNetwork& network,
            std::initializer_list<Expected> rows) {
    for (const Expected& row : rows) {
        const NcclEstimate got = nccl_time(Collective::all_reduce, row.bytes, group, network);
        const QString what = QString("%1 ranks, %2 B: %3/%4 %5 us")
                                 .arg(group.ranks)
                                 .arg(row.bytes)
                                 .arg(nccl_algorithm_name(got.algorithm))
                                 .arg(nccl_protocol_name(got.protocol))
                                 .arg(got.time_us);
        QVERIFY2(got.algorithm == row.algorithm && got.protocol == row.protocol, qPrintable(what));
        QVERIFY2(std::abs(got.time_us - row.time_us) < 0.01, qPrintable(what));
    }
}

}  // namespace

class TestNcclModel : public QObject {
    Q_OBJECT
private slots:
    // The graphs NCCL's search finds: 12 channels of 20 GB/s in a DGX A100 (6 of 40, split),
    // 12 of 30 in a DGX H100; across nodes a channel a NIC at the PCIe path's 24 or 48.
    void graphsFromTheParts() {
        const NcclGraphs a100 = nccl_graphs(kOneNode, kDgxA100);
        QCOMPARE(a100.ring.channels, 12);
        QCOMPARE(a100.ring.bw_intra, 20.0);
        QCOMPARE(a100.runtime_channels, 24);
        const NcclGraphs h100 = nccl_graphs(kOneNode, kDgxH100);
        QCOMPARE(h100.ring.channels, 12);
        QCOMPARE(h100.ring.bw_intra, 30.0);
        const NcclGraphs across = nccl_graphs(kTwoNodes, kDgxA100);
        QCOMPARE(across.ring.channels, 8);
        QCOMPARE(across.ring.bw_inter, 24.0);
        QCOMPARE(across.tree.bw_intra, 30.0);
        QCOMPARE(across.runtime_channels, 16);
        QCOMPARE(nccl_graphs(kTwoNodes, kDgxH100).ring.bw_inter, 48.0);
    }

    void allReduceOnDgxA100() {
        using enum NcclAlgorithm;
        using enum NcclProtocol;
        expect(kOneNode, kDgxA100,
               {{kKiB, ring, ll, 15.02},
                {kMiB, ring, ll, 35.92},
                {64 * kMiB, ring, simple, 545.34},
                {kGiB, ring, simple, 7885.37}});
        expect(kTwoNodes, kDgxA100,
               {{kKiB, tree, ll, 25.30},
                {kMiB, tree, ll128, 70.35},
                {64 * kMiB, ring, ll128, 864.43},
                {kGiB, ring, simple, 10771.92}});
    }

    // With NVLink SHARP (NVLS in a node, NVLSTree across) as NCCL enables it by default.
    void allReduceOnDgxH100() {
        using enum NcclAlgorithm;
        using enum NcclProtocol;
        expect(kOneNode, kDgxH100,
               {{kKiB, ring, ll, 15.01},
                {kMiB, ring, ll, 28.01},
                {64 * kMiB, nvls, simple, 271.72},
                {kGiB, nvls, simple, 3972.58}});
        expect(kTwoNodes, kDgxH100,
               {{kKiB, tree, ll, 25.27},
                {kMiB, tree, ll128, 62.51},
                {64 * kMiB, nvls, simple, 339.39},
                {kGiB, nvls, simple, 4428.29}});
        ClusterNetwork without = kDgxH100;
        without.nvls = false;
        expect(kOneNode, without,
               {{64 * kMiB, ring, simple, 382.22}, {kGiB, ring, simple, 5275.58}});
    }

    // Ring-only collectives: NCCL's latencies and algorithm bandwidths (all-gather's bytes are
    // the whole gathered buffer; a broadcast's rings share channels within a node only).
    void otherCollectivesOnDgxA100() {
        struct Row {
            Collective collective;
            const GroupPlacement& group;
            NcclProtocol protocol;
            double latency_us, algorithm_gbs;
        };
        for (const Row& row : std::initializer_list<Row>{
                 {Collective::all_gather, kOneNode, NcclProtocol::ll, 10.8, 100.229},
                 {Collective::reduce_scatter, kOneNode, NcclProtocol::simple, 32.2, 274.286},
                 {Collective::broadcast, kOneNode, NcclProtocol::ll128, 15.9, 220.8},
                 {Collective::all_gather, kTwoNodes, NcclProtocol::ll128, 46.0, 170.667},
                 {Collective::broadcast, kTwoNodes, NcclProtocol::simple, 232.4, 192.0}}) {
            const NcclPrice price =
                nccl_price(row.collective, row.group, kDgxA100, NcclAlgorithm::ring, row.protocol);
            QVERIFY(std::abs(price.latency_us - row.latency_us) < 0.01);
            QVERIFY(std::abs(price.algorithm_gbs - row.algorithm_gbs) < 0.001);
        }
        // Trees are all-reduce's alone.
        QCOMPARE(nccl_price(Collective::all_gather, kTwoNodes, kDgxA100, NcclAlgorithm::tree,
                            NcclProtocol::simple)
                     .algorithm_gbs,
                 0.0);
    }

    // A group leaving its node alone has all its NICs; groups leaving together share them: the
    // eight DP groups of TP 8 nodes get one NIC each, an eighth of a lone group's bandwidth.
    void groupsLeavingTogetherShareTheNics() {
        const GroupPlacement lone{.ranks = 16, .nodes = 2, .ranks_per_node = 8};
        const GroupPlacement shared{
            .ranks = 2, .nodes = 2, .ranks_per_node = 1, .groups_per_node = 8};
        const auto bus = [](const GroupPlacement& group) {
            return nccl_price(Collective::all_reduce, group, kDgxA100, NcclAlgorithm::ring,
                              NcclProtocol::simple)
                .bus_gbs;
        };
        QCOMPARE(bus(lone), 192.0);
        QCOMPARE(bus(shared), 24.0);
        QCOMPARE(nccl_time(Collective::all_reduce, kGiB, {.ranks = 1}, kDgxA100).time_us, 0.0);
    }

    // NVLink SHARP needs more than two GPUs of the communicator on a node (NCCL's
    // ncclNvlsInit): the DP groups of TP 8 nodes, one GPU a node, ring over one NIC each as on
    // an A100, never NVLSTree over all eight. Groups that do use NVLSTree across nodes share
    // the node's NICs like rings.
    void nvlsNeedsThreeGpusOfANodeAndSharesTheNics() {
        const auto nvls = [](const GroupPlacement& group) {
            return nccl_price(Collective::all_reduce, group, kDgxH100, NcclAlgorithm::nvls,
                              NcclProtocol::simple);
        };
        const GroupPlacement one_a_node{
            .ranks = 48, .nodes = 48, .ranks_per_node = 1, .groups_per_node = 8};
        QCOMPARE(nvls(one_a_node).algorithm_gbs, 0.0);
        QCOMPARE(nvls({.ranks = 2, .nodes = 1, .ranks_per_node = 2}).algorithm_gbs, 0.0);
        const NcclEstimate dp = nccl_time(Collective::all_reduce, kGiB, one_a_node, kDgxH100);
        QVERIFY(dp.algorithm != NcclAlgorithm::nvls);
        // A GiB all-reduced at one NIC's 48 GB/s bus bandwidth takes 2·47/48 GiB / 48 GB/s
        // and some latency: over 43 ms (NVLSTree over eight NICs had it in 6).
        QVERIFY(dp.time_us > 2.0 * 47 / 48 * kGiB / 48e3);
        QVERIFY(dp.time_us < 1.2 * 2.0 * 47 / 48 * kGiB / 48e3);
        const GroupPlacement four{.ranks = 16, .nodes = 4, .ranks_per_node = 4};
        GroupPlacement four_shared = four;
        four_shared.groups_per_node = 2;
        QVERIFY(nvls(four).algorithm_gbs > 0);
        QCOMPARE(nvls(four_shared).bus_gbs, nvls(four).bus_gbs / 2);
        QCOMPARE(nvls(kOneNode).bus_gbs, 8 * 0.85 * 7.0 / 8 * 2 * 40);  // within a node, alone
    }
};

QTEST_GUILESS_MAIN(TestNcclModel)
#include "test_nccl_model.moc"
