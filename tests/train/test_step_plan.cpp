// The step planner: every document trained exactly once per epoch whatever the balancer,
// the same plan for the same seed, and bad data refused before any work.
#include <QTemporaryDir>
#include <QTest>

#include <fstream>
#include <map>

#include "engine/data/step_plan.h"

using namespace fulcrum;
using namespace fulcrum::engine;

namespace {

TrainingDocuments long_tail_documents(std::int64_t count) {
    DataOptions options;
    options.lengths_spec = "long-tail:context=512,median=60,sigma=1.0";
    options.synthetic_documents = count;
    options.max_length = 512;
    options.seed = 5;
    auto documents = load_training_documents(options);
    if (!documents) {
        qFatal("%s", documents.error().message.c_str());
    }
    return std::move(*documents);
}

PlannerOptions planner_options(balance::Balancer balancer, int dp, int cp) {
    PlannerOptions options;
    options.packing.balancer = balancer;
    options.packing.microbatches = 4;
    options.packing.capacity = 512;
    options.packing.ilp_time_limit_s = 0.2;
    options.dp = dp;
    options.cp = cp;
    options.sharding = balance::CpSharding::per_document;
    options.seed = 9;
    return options;
}

}  // namespace

class StepPlanTest : public QObject {
    Q_OBJECT

private slots:
    void everyTokenOncePerEpoch_data() {
        QTest::addColumn<int>("balancer");
        QTest::addColumn<int>("dp");
        QTest::addColumn<int>("cp");
        QTest::newRow("fixed dp1 cp1") << int(balance::Balancer::fixed) << 1 << 1;
        QTest::newRow("fixed dp2 cp2") << int(balance::Balancer::fixed) << 2 << 2;
        QTest::newRow("ilp dp2 cp1") << int(balance::Balancer::ilp) << 2 << 1;
        QTest::newRow("wlb dp1 cp2") << int(balance::Balancer::wlb) << 1 << 2;
        QTest::newRow("wlb dp2 cp2") << int(balance::Balancer::wlb) << 2 << 2;
    }
    void everyTokenOncePerEpoch() {
        QFETCH(int, balancer);
        QFETCH(int, dp);
        QFETCH(int, cp);
        const TrainingDocuments documents = long_tail_documents(600);
        auto planner =
            StepPlanner::create(document_lengths(documents),
                                planner_options(static_cast<balance::Balancer>(balancer), dp, cp));
        QVERIFY(planner.ok());
        // tokens[document] = how often each of its tokens was held by some CP rank.
        std::map<std::uint64_t, std::vector<int>> held;
        int steps = 0;
        while (true) {
            auto packed = planner->pack_next();
            QVERIFY(packed.ok());
            if (planner->epoch() > 0) {
                break;  // the first step of the second epoch
            }
            auto plan = planner->complete(std::move(*packed));
            QVERIFY(plan.ok());
            QCOMPARE(static_cast<int>(plan->replicas.size()), dp);
            for (const auto& replica : plan->replicas) {
                for (const auto& microbatch : replica) {
                    QVERIFY(microbatch.packed.tokens <= 512);
                    QCOMPARE(static_cast<int>(microbatch.cp.ranks.size()), cp);
                    for (const auto& shard : microbatch.cp.ranks) {
                        for (const auto& range : shard.ranges) {
                            auto& counts = held[range.document_id];
                            counts.resize(documents.texts[range.document_id].size());
                            for (auto t = range.begin; t < range.end; ++t) {
                                ++counts[static_cast<std::size_t>(t)];
                            }
                        }
                    }
                }
            }
            ++steps;
        }
        QVERIFY(steps > 5);
        QCOMPARE(held.size(), documents.texts.size());
        for (const auto& [document, counts] : held) {
            QCOMPARE(counts.size(), documents.texts[document].size());
            for (int count : counts) {
                QCOMPARE(count, 1);
            }
        }
    }

    // --epochs 1: the planner stops after the epoch's drain; every balancer trains the same
    // documents and tokens, and only the balancers that hold documents back report waits.
    void oneEpochPerBalancer() {
        const TrainingDocuments documents = long_tail_documents(400);
        std::map<int, balance::TrainedTotals> totals;
        for (auto balancer :
             {balance::Balancer::fixed, balance::Balancer::ilp, balance::Balancer::wlb}) {
            PlannerOptions options = planner_options(balancer, 2, 1);
            options.epochs = 1;
            options.tune_wlb_thresholds = true;
            auto planner = StepPlanner::create(document_lengths(documents), options);
            QVERIFY(planner.ok());
            std::map<std::uint64_t, int> trained;
            balance::TrainedTotals& total = totals[int(balancer)];
            bool last = false;
            while (!last) {
                QVERIFY(!planner->finished());
                auto plan = planner->complete(std::move(*planner->pack_next()));
                QVERIFY(plan.ok());
                QCOMPARE(plan->epoch, 0);
                for (const auto& replica : plan->replicas) {
                    for (const auto& microbatch : replica) {
                        for (const auto& document : microbatch.packed.documents) {
                            ++trained[document.id];
                        }
                    }
                }
                total.add(*plan);
                last = plan->last;
            }
            QVERIFY(planner->finished());
            QVERIFY(!planner->pack_next().ok());
            QCOMPARE(trained.size(), documents.texts.size());
            for (const auto& [id, count] : trained) {
                QCOMPARE(count, 1);
            }
            QCOMPARE(total.documents, std::int64_t(documents.texts.size()));
            QCOMPARE(total.tokens, documents.total_tokens());
            if (balancer == balance::Balancer::wlb) {
                QVERIFY(planner->wlb_tuning().has_value());
                QCOMPARE(planner->packing().wlb_thresholds, planner->wlb_tuning()->thresholds);
            }
        }
        QCOMPARE(totals[int(balance::Balancer::fixed)].max_delay_steps, 0);
        QVERIFY(totals[int(balance::Balancer::ilp)].max_delay_steps > 0);
        const auto& wlb = totals[int(balance::Balancer::wlb)];
        QVERIFY(wlb.max_delay_steps > 0);
        QVERIFY(wlb.mean_delay_steps() > 0 && wlb.mean_delay_steps() < wlb.max_delay_steps);
    }

    void samePlanForTheSameSeed() {
        const TrainingDocuments documents = long_tail_documents(300);
        auto a = StepPlanner::create(document_lengths(documents),
                                     planner_options(balance::Balancer::wlb, 2, 2));
        auto b = StepPlanner::create(document_lengths(documents),
                                     planner_options(balance::Balancer::wlb, 2, 2));
        for (int step = 0; step < 5; ++step) {
            auto plan_a = a->complete(std::move(*a->pack_next()));
            auto plan_b = b->complete(std::move(*b->pack_next()));
            QCOMPARE(plan_a->target_tokens, plan_b->target_tokens);
            for (std::size_t r = 0; r < plan_a->replicas.size(); ++r) {
                QCOMPARE(plan_a->replicas[r].size(), plan_b->replicas[r].size());
                for (std::size_t m = 0; m < plan_a->replicas[r].size(); ++m) {
                    QCOMPARE(plan_a->replicas[r][m].cp.ranks[1].ranges,
                             plan_b->replicas[r][m].cp.ranks[1].ranges);
                }
            }
        }
    }

    void balancersBeatFixedOnImbalance() {
        const TrainingDocuments documents = long_tail_documents(2000);
        auto mean_imbalance = [&](balance::Balancer balancer) {
            auto planner =
                StepPlanner::create(document_lengths(documents), planner_options(balancer, 1, 1));
            double sum = 0;
            for (int step = 0; step < 20; ++step) {
                sum += planner->complete(std::move(*planner->pack_next()))->imbalance;
            }
            return sum / 20;
        };
        const double fixed = mean_imbalance(balance::Balancer::fixed);
        const double wlb = mean_imbalance(balance::Balancer::wlb);
        QVERIFY2(wlb < 0.8 * fixed, qPrintable(QString("wlb %1 fixed %2").arg(wlb).arg(fixed)));
    }

    void badDataIsRefused() {
        QTemporaryDir dir;
        DataOptions empty;
        empty.data_dir = dir.path().toStdString();
        auto none = load_training_documents(empty);
        QVERIFY(!none.ok());

        const std::string lengths = dir.filePath("lengths.txt").toStdString();
        std::ofstream(lengths) << "100\n5000\n";
        DataOptions too_long;
        too_long.lengths_spec = "file:" + lengths;
        too_long.max_length = 1024;
        auto refused = load_training_documents(too_long);
        QVERIFY(!refused.ok());
        QVERIFY2(refused.error().message.find("longer than any micro-batch") != std::string::npos,
                 refused.error().message.c_str());
    }
};

QTEST_GUILESS_MAIN(StepPlanTest)
#include "test_step_plan.moc"
