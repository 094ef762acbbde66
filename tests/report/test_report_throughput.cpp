// Tokens and tokens/s of runs compared (core/report/run_throughput): simulated runs over one
// epoch of the same documents give the simulator's own tokens and tokens/s and a ratio
// against the first; runs by steps trained different documents, and get no ratio.
#include <QTemporaryDir>
#include <QTest>

#include "core/analysis/run_analysis.h"
#include "core/report/html_report.h"
#include "core/report/run_throughput.h"
#include "core/sim/simulator.h"
#include "core/store/trace_reader.h"

using namespace fulcrum;

class ReportThroughputTest : public QObject {
    Q_OBJECT

    QTemporaryDir work_;

    struct Played {
        sim::SimulationResult result;
        report::ReportRun run;
    };

    Played play(balance::Balancer balancer, int epochs, const QString& name) {
        sim::SimulationConfig config;
        config.model = {.layers = 2, .hidden = 64, .heads = 4, .context = 256, .vocab = 256};
        config.layout.grid = {.dp = 2, .tp = 1, .pp = 2, .cp = 2};
        config.balancer = balancer;
        config.layout.microbatches = 4;
        config.steps = 3;
        config.epochs = epochs;
        config.lengths = "long-tail:context=256,median=32";
        config.documents = 150;
        sim::SimulationOutput output;
        output.path = work_.filePath(name).toStdString();
        auto result = sim::simulate_to_file(config, output);
        if (!result) {
            qFatal("%s", result.error().message.c_str());
        }
        auto run = report::load_report_run(output.path);
        if (!run) {
            qFatal("%s", run.error().message.c_str());
        }
        return {std::move(*result), std::move(*run)};
    }

private slots:
    void initTestCase() { QVERIFY(work_.isValid()); }

    void sameDocumentsOverAnEpoch() {
        const Played fixed = play(balance::Balancer::fixed, 1, "fixed.fulcrum");
        const Played wlb = play(balance::Balancer::wlb, 1, "wlb.fulcrum");
        const report::RunThroughput& a = fixed.run.throughput;
        const report::RunThroughput& b = wlb.run.throughput;
        QCOMPARE(a.documents, std::int64_t{150});
        QCOMPARE(a.tokens, fixed.result.tokens);
        QCOMPARE(b.tokens, wlb.result.tokens);
        QCOMPARE(a.epochs, 1);
        QCOMPARE(a.steps, static_cast<int>(fixed.result.steps.size()));
        QVERIFY(b.steps != a.steps || b.step_time_ns != a.step_time_ns);
        QCOMPARE(a.tokens_per_s(), fixed.result.tokens_per_second);
        QCOMPARE(b.tokens_per_s(), wlb.result.tokens_per_second);
        QVERIFY(report::same_documents(a, b));
        // The report reads the run a rank at a time and its workload in the table's order
        // (analyze_run_file); the run held whole has it sorted: the same tally either way.
        auto reader = store::TraceReader::open(work_.filePath("wlb.fulcrum").toStdString());
        QVERIFY(reader.ok());
        auto held = analysis::load_run_trace(*reader);
        QVERIFY(held.ok());
        auto held_analysis = analysis::analyze_run(*held);
        QVERIFY(held_analysis.ok());
        const report::RunThroughput whole = report::run_throughput(*held, *held_analysis);
        // The report tallied the rows as the analysis's one scan read them, holding none; the
        // scan hands over every row of the table, once.
        std::size_t visited = 0;
        analysis::AnalyzeOptions counting;
        counting.read_workload = false;
        counting.visit_workload = [&visited](const WorkloadEntry&) { ++visited; };
        analysis::RunTrace metadata;
        QVERIFY(analysis::analyze_run_file(*reader, metadata, counting).ok());
        QVERIFY(metadata.workload.empty());
        QVERIFY(!held->workload.empty());
        QCOMPARE(visited, held->workload.size());
        QCOMPARE(whole.tokens, b.tokens);
        QCOMPARE(whole.documents, b.documents);
        QCOMPARE(whole.documents_fingerprint, b.documents_fingerprint);
        QCOMPARE(whole.step_time_ns, b.step_time_ns);
        const auto ratio = report::tokens_per_s_vs(b, a);
        QVERIFY(ratio.has_value());
        QCOMPARE(*ratio, wlb.result.tokens_per_second / fixed.result.tokens_per_second);
        QCOMPARE(QString::fromStdString(report::comparison_basis({a, b})),
                 QString("Every run trained the same 150 documents (1 epoch), each as often: "
                         "tokens/s against the first run is the speedup."));
        const std::string html = report::html_report({fixed.run, wlb.run});
        QVERIFY(html.find("<section id=\"throughput\"><h2>Throughput</h2>") != std::string::npos);
        QVERIFY(html.find("tokens/s vs first") != std::string::npos);
        QVERIFY(html.find("the same 150 documents") != std::string::npos);
    }

    void differentDocumentsByStepsGetNoRatio() {
        const Played fixed = play(balance::Balancer::fixed, 0, "fixed-steps.fulcrum");
        const Played wlb = play(balance::Balancer::wlb, 0, "wlb-steps.fulcrum");
        QCOMPARE(fixed.run.throughput.steps, 3);
        QVERIFY(!report::same_documents(fixed.run.throughput, wlb.run.throughput));
        QVERIFY(!report::tokens_per_s_vs(wlb.run.throughput, fixed.run.throughput));
        QVERIFY(report::comparison_basis({fixed.run.throughput, wlb.run.throughput})
                    .starts_with("The runs trained different documents"));
        const std::string html = report::html_report({fixed.run, wlb.run});
        QVERIFY(html.find("trained different documents") != std::string::npos);
    }
};

QTEST_GUILESS_MAIN(ReportThroughputTest)
#include "test_report_throughput.moc"
