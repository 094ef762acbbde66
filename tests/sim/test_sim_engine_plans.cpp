// The simulator trains on what fulcrum-train would: for the same options it samples the same
// documents (engine/data/step_plan.cpp, load_training_documents) and its run's workload table
// holds exactly the CP shards of the engine's step plans, step by step, for every balancer,
// sharding and length source.
#include <QTemporaryDir>
#include <QTest>

#include <fstream>
#include <set>
#include <tuple>

#include "core/sim/simulator.h"
#include "core/store/trace_reader.h"
#include "engine/data/step_plan.h"

using namespace fulcrum;

namespace {

// step, dp replica, micro-batch, CP rank, document, token range
using Held = std::tuple<int, int, int, int, std::int64_t, std::int64_t, std::int64_t>;

}  // namespace

class EnginePlansTest : public QObject {
    Q_OBJECT

    QTemporaryDir work_;

private slots:
    void initTestCase() {
        QVERIFY(work_.isValid());
        std::ofstream file(work_.filePath("lengths.txt").toStdString());
        for (int i = 0; i < 300; ++i) {
            file << (i % 17 == 0 ? 900 : 20 + (i * 37) % 200) << "\n";
        }
    }

    void samePlans_data() {
        QTest::addColumn<QString>("balancer");
        QTest::addColumn<QString>("sharding");
        QTest::addColumn<QString>("lengths");
        QTest::addColumn<int>("dp");
        QTest::addColumn<int>("cp");
        QTest::newRow("fixed per-doc") << "fixed"
                                       << "per-doc"
                                       << "long-tail:context=1024,median=128" << 2 << 2;
        QTest::newRow("wlb per-doc") << "wlb"
                                     << "per-doc"
                                     << "long-tail:context=1024,median=128" << 2 << 2;
        QTest::newRow("ilp zigzag") << "ilp"
                                    << "zigzag"
                                    << "lognormal:median=150,sigma=0.9" << 1 << 2;
        QTest::newRow("wlb adaptive, 4 CP") << "wlb"
                                            << "adaptive"
                                            << "lognormal:median=200" << 1 << 4;
        QTest::newRow("fixed contiguous, file") << "fixed"
                                                << "contiguous"
                                                << "file:" << 2 << 2;
    }
    void samePlans() {
        QFETCH(QString, balancer);
        QFETCH(QString, sharding);
        QFETCH(QString, lengths);
        QFETCH(int, dp);
        QFETCH(int, cp);
        if (lengths == "file:") {
            lengths += work_.filePath("lengths.txt");
        }
        constexpr int kContext = 1024;
        constexpr int kMicrobatches = 4;
        constexpr int kSteps = 6;
        constexpr std::uint64_t kSeed = 3;

        // The engine's path, as fulcrum-train takes it (engine/tools/train.cpp).
        engine::DataOptions data;
        data.lengths_spec = lengths.toStdString();
        data.synthetic_documents = 600;
        data.max_length = kContext;
        data.seed = kSeed;
        auto documents = engine::load_training_documents(data);
        QVERIFY2(documents.ok(), documents.ok() ? "" : documents.error().message.c_str());
        balance::PlannerOptions options;
        options.packing.balancer = *balance::parse_balancer(balancer.toStdString());
        options.packing.microbatches = kMicrobatches;
        options.packing.capacity = kContext;
        options.packing.ilp_time_limit_s = 1.0;
        options.dp = dp;
        options.cp = cp;
        options.sharding = *balance::parse_cp_sharding(sharding.toStdString());
        options.seed = kSeed;
        options.ilp_window = 4;
        options.packing.cost = balance::PackingCost::from_model(2, 64, 256);
        options.tune_wlb_thresholds = true;
        options.attention_kernel = *balance::attention_kernel_model("cpu");  // the CPU engine's
        auto planner = balance::StepPlanner::create(engine::document_lengths(*documents), options);
        QVERIFY(planner.ok());
        std::set<Held> engine_held;
        for (int s = 0; s < kSteps; ++s) {
            auto packed = planner->pack_next();
            QVERIFY(packed.ok());
            auto plan = planner->complete(std::move(*packed));
            QVERIFY(plan.ok());
            for (std::size_t d = 0; d < plan->replicas.size(); ++d) {
                for (std::size_t j = 0; j < plan->replicas[d].size(); ++j) {
                    const auto& shards = plan->replicas[d][j].cp.ranks;
                    for (std::size_t c = 0; c < shards.size(); ++c) {
                        for (const auto& range : shards[c].ranges) {
                            engine_held.insert({plan->step, int(d), int(j), int(c),
                                                std::int64_t(range.document_id), range.begin,
                                                range.end});
                        }
                    }
                }
            }
        }

        sim::SimulationConfig config;
        config.model = {.layers = 2, .hidden = 64, .heads = 4, .context = kContext, .vocab = 256};
        config.layout.grid = {.dp = dp, .tp = 2, .pp = 2, .cp = cp};
        config.balancer = options.packing.balancer;
        config.sharding = options.sharding;
        config.layout.microbatches = kMicrobatches;
        config.steps = kSteps;
        config.lengths = lengths.toStdString();
        config.documents = 600;
        config.seed = kSeed;
        // The engine's S_max default: it has no memory model for its device.
        config.wlb_max_tokens = kContext;
        config.attention_kernel = "cpu";
        sim::SimulationOutput output;
        output.path =
            work_.filePath(QString(QTest::currentDataTag()).replace(' ', '_') + ".fulcrum")
                .toStdString();
        auto simulated = sim::simulate_to_file(config, output);
        QVERIFY2(simulated.ok(), simulated.ok() ? "" : simulated.error().message.c_str());
        auto reader = store::TraceReader::open(output.path);
        QVERIFY(reader.ok());
        auto workload = reader->workload();
        QVERIFY(workload.ok());
        std::set<Held> simulator_held;
        for (const WorkloadEntry& entry : *workload) {
            const RankInfo& rank = reader->ranks()[static_cast<std::size_t>(entry.rank)];
            if (rank.pp == 0 && rank.tp == 0) {
                simulator_held.insert({entry.step, rank.dp, entry.microbatch, rank.cp, entry.doc_id,
                                       entry.token_begin, entry.token_end});
            }
        }
        QVERIFY(!engine_held.empty());
        QCOMPARE(simulator_held.size(), engine_held.size());
        QVERIFY(simulator_held == engine_held);
    }
};

QTEST_GUILESS_MAIN(EnginePlansTest)
#include "test_sim_engine_plans.moc"
