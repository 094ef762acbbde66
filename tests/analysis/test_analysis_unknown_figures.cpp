// No figure without data behind it: diff tests of what `fulcrum analyze --json` says about
// small hand-built runs that lack something (a workload table, a second rank, a pipeline, context
// parallelism, step ranges, coordinates). Each row is a run, a JSON pointer into
// analysis_json and the exact JSON expected there; a missing figure is `null`, and the notes
// say why.
#include <QTest>

#include <map>
#include <nlohmann/json.hpp>

#include "core/analysis/run_analysis.h"
#include "tests/analysis/trace_builders.h"

using namespace fulcrum;
using namespace fulcrum::analysis;
using namespace fulcrum::analysis::builders;

namespace {

void pass(RunTrace& trace, int rank, std::int64_t start, std::int64_t duration, int step, int mb,
          Phase phase) {
    trace.add_range(host(trace, rank), phase == Phase::forward ? "forward" : "backward",
                    Category::compute, start, start + duration, step, mb, 0, phase);
}

// A forward pass of `duration` whose middle `attention` ns are an attention range.
void pass_with_attention(RunTrace& trace, int rank, int step, int mb, std::int64_t duration,
                         std::int64_t attention) {
    pass(trace, rank, 0, duration, step, mb, Phase::forward);
    trace.add_range(host(trace, rank), "attention", Category::attention, 1, 1 + attention, step, mb,
                    0, Phase::forward);
}

void step_range(RunTrace& trace, int rank, int step, std::int64_t start, std::int64_t end) {
    trace.add_range(host(trace, rank), "step", Category::schedule, start, end, step);
}

// Two DP ranks (pp 1, cp 1), one step of one micro-batch, no workload table:
//   compute rank 0: 100 + 200 = 300, rank 1: 60 + 120 = 180 → max/mean 300/240 = 1.25.
RunTrace two_ranks_without_workload() {
    RunTrace trace;
    trace.run.config_json = R"({"dp":2,"tp":1,"pp":1,"cp":1,"schedule":"1f1b","microbatches":1})";
    add_rank(trace, 0, 0, 0, 0, 0);
    add_rank(trace, 1, 1, 0, 0, 0);
    step_range(trace, 0, 0, 0, 1000);
    step_range(trace, 1, 0, 0, 1000);
    pass(trace, 0, 0, 100, 0, 0, Phase::forward);
    pass(trace, 0, 100, 200, 0, 0, Phase::backward);
    pass(trace, 1, 0, 60, 0, 0, Phase::forward);
    pass(trace, 1, 60, 120, 0, 0, Phase::backward);
    trace.finish();
    return trace;
}

// The same passes on ranks without coordinates and a run without run.config (a foreign
// trace annotated with forward/backward): the imbalance is measured, the grid is not known.
RunTrace two_ranks_without_coordinates() {
    RunTrace trace;
    RankInfo info;
    for (int rank = 0; rank < 2; ++rank) {
        info.rank = rank;
        trace.add_rank(info);
    }
    step_range(trace, 0, 0, 0, 1000);
    step_range(trace, 1, 0, 0, 1000);
    pass(trace, 0, 0, 100, 0, 0, Phase::forward);
    pass(trace, 0, 100, 200, 0, 0, Phase::backward);
    pass(trace, 1, 0, 60, 0, 0, Phase::forward);
    pass(trace, 1, 60, 120, 0, 0, Phase::backward);
    trace.finish();
    return trace;
}

// One rank with passes and the work it held (a 10-token document: 55 causal pairs): measured
// and predicted, but nothing to compare across ranks.
RunTrace one_rank() {
    RunTrace trace;
    trace.run.config_json = R"({"dp":1,"tp":1,"pp":1,"cp":1,"microbatches":1})";
    add_rank(trace, 0, 0, 0, 0, 0);
    step_range(trace, 0, 0, 0, 1000);
    pass(trace, 0, 0, 100, 0, 0, Phase::forward);
    pass(trace, 0, 100, 200, 0, 0, Phase::backward);
    trace.workload.push_back({0, 0, 0, 7, 10, 0, 10, "fixed"});
    trace.finish();
    return trace;
}

// A CP group of two (cp 2), attention measured (30 and 10: max/mean 1.5), no workload table.
RunTrace cp_group_without_workload() {
    RunTrace trace;
    trace.run.config_json = R"({"dp":1,"tp":1,"pp":1,"cp":2,"cp_shard":"zigzag"})";
    add_rank(trace, 0, 0, 0, 0, 0);
    add_rank(trace, 1, 0, 0, 0, 1);
    pass_with_attention(trace, 0, 0, 0, 100, 30);
    pass_with_attention(trace, 1, 0, 0, 100, 10);
    trace.finish();
    return trace;
}

// Two stages of GPipe with two micro-batches: the pipeline is there, (p−1)/m = 0.5.
RunTrace two_stages() {
    RunTrace trace;
    trace.run.config_json = R"({"dp":1,"tp":1,"pp":2,"cp":1,"schedule":"gpipe","microbatches":2})";
    add_rank(trace, 0, 0, 0, 0, 0);
    add_rank(trace, 1, 0, 0, 1, 0);
    for (int stage = 0; stage < 2; ++stage) {
        step_range(trace, stage, 0, 0, 120);
        for (int mb = 0; mb < 2; ++mb) {
            trace.add_range(host(trace, stage), "forward", Category::compute, (stage + mb) * 10,
                            (stage + mb) * 10 + 10, 0, mb, static_cast<std::int16_t>(stage),
                            Phase::forward);
            trace.add_range(host(trace, stage), "backward", Category::compute,
                            50 + (1 - stage + mb) * 20, 50 + (1 - stage + mb) * 20 + 20, 0, mb,
                            static_cast<std::int16_t>(stage), Phase::backward);
        }
    }
    trace.finish();
    return trace;
}

// A foreign trace as an import leaves it: no coordinates, no run.config, no `step` ranges,
// no passes. Rank 0: compute [100, 400), a collective [400, 500), compute [700, 1000): its whole
// trace [100, 1000) is 900 = 600 compute + 100 exposed communication + 200 idle. Rank 1:
// compute [50, 250) and a mark at 250: 200 = 200 compute.
RunTrace foreign_trace_without_steps() {
    RunTrace trace;
    RankInfo info;
    for (int rank = 0; rank < 2; ++rank) {
        info.rank = rank;
        trace.add_rank(info);
        trace.add_lane(rank, LaneKind::host_thread, "thread");
    }
    LaneTrace& first = trace.ranks[0].lanes.front();
    trace.add_range(first, "aten::mm", Category::compute, 100, 400);
    trace.add_range(first, "ncclAllReduce", Category::communication, 400, 500);
    trace.add_range(first, "aten::mm", Category::compute, 700, 1000);
    LaneTrace& second = trace.ranks[1].lanes.front();
    trace.add_range(second, "aten::mm", Category::compute, 50, 250);
    trace.add_range(second, "Record Window End", Category::other, 250, 250).kind = EventKind::mark;
    trace.finish();
    return trace;
}

using Builder = RunTrace (*)();
const std::map<QString, Builder>& runs() {
    static const std::map<QString, Builder> all = {
        {"two ranks without workload", two_ranks_without_workload},
        {"two ranks without coordinates", two_ranks_without_coordinates},
        {"one rank", one_rank},
        {"cp group without workload", cp_group_without_workload},
        {"two stages", two_stages},
        {"foreign trace without steps", foreign_trace_without_steps},
    };
    return all;
}

RunAnalysis analysed(const QString& run) {
    const RunTrace trace = runs().at(run)();
    auto analysis = analyze_run(trace);
    if (!analysis) {
        qFatal("analyze_run: %s", analysis.error().message.c_str());
    }
    return std::move(*analysis);
}

}  // namespace

class UnknownFiguresTest : public QObject {
    Q_OBJECT

private slots:
    void jsonSaysNullWhereNothingIsKnown_data() {
        QTest::addColumn<QString>("run");
        QTest::addColumn<QString>("pointer");
        QTest::addColumn<QString>("expected");
        // No workload table: nothing predicted, so no predicted imbalance, unit or cost model;
        // the measured imbalance across the two ranks is there.
        const QString no_workload = "two ranks without workload";
        QTest::newRow("no workload: measured imbalance")
            << no_workload << "/imbalance/compute_imbalance"
            << "1.25";
        QTest::newRow("no workload: predicted imbalance")
            << no_workload << "/imbalance/predicted_imbalance"
            << "null";
        QTest::newRow("no workload: predicted unit") << no_workload << "/imbalance/predicted_unit"
                                                     << "null";
        QTest::newRow("no workload: predicted matrix")
            << no_workload << "/imbalance/predicted_by_step"
            << R"({"rows":[0,1],"columns":[0],"values":[[null],[null]],"column_imbalance":[null]})";
        QTest::newRow("no workload: cost model") << no_workload << "/cost_model"
                                                 << "null";
        // pp = 1 and cp = 1: no pipeline and no CP group, so none of their figures.
        QTest::newRow("no pp: bubbles")
            << no_workload << "/bubbles"
            << R"({"schedule":null,"schedule_assumed":false,"theory_fraction":null,)"
               R"("mean_measured_fraction":null,)"
               R"("pipelines":[],"stages":[]})";
        QTest::newRow("no cp: CP load")
            << no_workload << "/cp_load"
            << R"({"sharding":null,"cp":1,"mean_measured_imbalance":null,)"
               R"("mean_predicted_imbalance":null,"mean_predicted_by_sharding":{},"groups":[]})";
        QTest::newRow("known grid") << no_workload << "/run/pp"
                                    << "1";
        // No coordinates: no pipeline and no CP groups can be formed; the measured imbalance
        // across the two ranks is still there.
        const QString no_grid = "two ranks without coordinates";
        QTest::newRow("no grid: bubbles")
            << no_grid << "/bubbles"
            << R"({"schedule":null,"schedule_assumed":false,"theory_fraction":null,)"
               R"("mean_measured_fraction":null,)"
               R"("pipelines":[],"stages":[]})";
        QTest::newRow("no grid: CP load")
            << no_grid << "/cp_load"
            << R"({"sharding":null,"cp":null,"mean_measured_imbalance":null,)"
               R"("mean_predicted_imbalance":null,"mean_predicted_by_sharding":{},"groups":[]})";
        QTest::newRow("no grid: measured imbalance") << no_grid << "/imbalance/compute_imbalance"
                                                     << "1.25";
        // One rank: max/mean over one value is 1 by definition; no figure, measured or
        // predicted, though both matrices hold its values.
        QTest::newRow("one rank: measured imbalance") << "one rank"
                                                      << "/imbalance/compute_imbalance"
                                                      << "null";
        QTest::newRow("one rank: predicted imbalance") << "one rank"
                                                       << "/imbalance/predicted_imbalance"
                                                       << "null";
        QTest::newRow("one rank: measured matrix")
            << "one rank"
            << "/imbalance/compute_by_step"
            << R"({"rows":[0],"columns":[0],"values":[[300.0]],"column_imbalance":[null]})";
        QTest::newRow("one rank: predicted matrix") << "one rank"
                                                    << "/imbalance/predicted_by_step/values"
                                                    << "[[55.0]]";
        QTest::newRow("one rank: predicted unit") << "one rank"
                                                  << "/imbalance/predicted_unit"
                                                  << R"("pairs")";
        QTest::newRow("one rank: micro-batch column")
            << "one rank"
            << "/imbalance/by_microbatch/0/compute_ns/column_imbalance"
            << "[null]";
        // A CP group without workload: attention was measured, pairs were not predicted.
        const QString cp = "cp group without workload";
        QTest::newRow("no workload: CP measured") << cp << "/cp_load/groups/0/measured_imbalance"
                                                  << "1.5";
        QTest::newRow("no workload: CP predicted") << cp << "/cp_load/groups/0/predicted_imbalance"
                                                   << "null";
        QTest::newRow("no workload: CP rank")
            << cp << "/cp_load/groups/0/ranks/1"
            << R"({"rank":1,"cp_rank":1,"attention_ns":10,"tokens":null,"pairs":null})";
        QTest::newRow("no workload: CP means") << cp << "/cp_load/mean_predicted_imbalance"
                                               << "null";
        QTest::newRow("cp 2: CP measured mean") << cp << "/cp_load/mean_measured_imbalance"
                                                << "1.5";
        // A pipeline: the theory is there (the control for the rows above).
        QTest::newRow("pp 2: theory") << "two stages"
                                      << "/bubbles/theory_fraction"
                                      << "0.5";
        QTest::newRow("pp 2: schedule") << "two stages"
                                        << "/bubbles/schedule"
                                        << R"("gpipe")";
        // A foreign trace: no coordinates (so no degrees), no names, no micro-batches, and a
        // step breakdown of one whole-trace window per rank without a step number.
        const QString foreign = "foreign trace without steps";
        QTest::newRow("no grid: run")
            << foreign << "/run"
            << R"({"name":"","origin":"captured","events":5,"passes":0,"dp":null,"tp":null,)"
               R"("pp":null,"cp":null,"schedule":null,"balancer":null,"cp_shard":null,)"
               R"("microbatches":null})";
        QTest::newRow("no steps: whole-trace windows")
            << foreign << "/step_breakdown"
            << R"([{"rank":0,"step":null,"whole_trace":true,"wall_ns":900,"compute_ns":600,)"
               R"("overlapped_communication_ns":0,"exposed_communication_ns":100,"other_ns":0,)"
               R"("idle_ns":200},)"
               R"({"rank":1,"step":null,"whole_trace":true,"wall_ns":200,"compute_ns":200,)"
               R"("overlapped_communication_ns":0,"exposed_communication_ns":0,"other_ns":0,)"
               R"("idle_ns":0}])";
        QTest::newRow("no grid: CP degree") << foreign << "/cp_load/cp"
                                            << "null";
        QTest::newRow("no grid: imbalance") << foreign << "/imbalance/compute_imbalance"
                                            << "null";
    }
    void jsonSaysNullWhereNothingIsKnown() {
        QFETCH(QString, run);
        QFETCH(QString, pointer);
        QFETCH(QString, expected);
        // Ordered: members compare in the order docs/analyses.md lists them.
        const auto root = nlohmann::ordered_json::parse(analysis_json(analysed(run)));
        const nlohmann::ordered_json::json_pointer at(pointer.toStdString());
        QVERIFY2(root.contains(at), qPrintable(pointer + " is missing"));
        QCOMPARE(QString::fromStdString(root.at(at).dump()), expected);
    }

    // Every figure left out has its reason among the notes, once.
    void notesSayWhatIsMissing_data() {
        QTest::addColumn<QString>("run");
        QTest::addColumn<QString>("note");
        QTest::newRow("no workload") << "two ranks without workload"
                                     << "no workload table";
        QTest::newRow("no grid") << "two ranks without coordinates"
                                 << "grid unknown";
        QTest::newRow("one rank") << "one rank"
                                  << "no step with passes on two ranks or more";
        QTest::newRow("no steps") << "foreign trace without steps"
                                  << "no step ranges";
        QTest::newRow("no passes") << "foreign trace without steps"
                                   << "no forward/backward ranges";
    }
    void notesSayWhatIsMissing() {
        QFETCH(QString, run);
        QFETCH(QString, note);
        const RunAnalysis analysis = analysed(run);
        int found = 0;
        for (const std::string& line : analysis.notes) {
            found += QString::fromStdString(line).contains(note) ? 1 : 0;
        }
        QVERIFY2(
            found == 1,
            qPrintable(QStringLiteral("%1 notes with \"%2\" in:\n%3")
                           .arg(found)
                           .arg(note)
                           .arg(QString::fromStdString(nlohmann::json(analysis.notes).dump(2)))));
    }

    // A run that lacks nothing gets none of those notes: pp = 1 or cp = 1 is a run without
    // that dimension, not a run missing data.
    void completeRunHasNoSuchNotes_data() {
        QTest::addColumn<QString>("run");
        QTest::newRow("pp 2, cp 1") << "two stages";
        QTest::newRow("pp 1, cp 1") << "two ranks without workload";
    }
    void completeRunHasNoSuchNotes() {
        QFETCH(QString, run);
        const RunAnalysis analysis = analysed(run);
        for (const std::string& line : analysis.notes) {
            const QString note = QString::fromStdString(line);
            QVERIFY2(!note.contains("pp = 1") && !note.contains("cp = 1") &&
                         !note.contains("no step ranges") && !note.contains("two ranks or more") &&
                         !note.contains("grid unknown"),
                     qPrintable(note));
        }
    }

    // The whole-trace window's parts add up to its wall time, which is the rank's span.
    void wholeTraceWindowAddsUp() {
        const RunTrace trace = foreign_trace_without_steps();
        const std::vector<StepBreakdown> rows = step_breakdown(trace);
        QCOMPARE(rows.size(), std::size_t{2});
        for (const StepBreakdown& row : rows) {
            QVERIFY(row.whole_trace);
            QVERIFY(!row.step);
            QCOMPARE(row.compute_ns + row.exposed_communication_ns + row.other_ns + row.idle_ns,
                     row.wall_ns());
        }
        QCOMPARE(rows[0].start_ns, 100);
        QCOMPARE(rows[0].end_ns, 1000);
        QCOMPARE(rows[1].start_ns, 50);
        QCOMPARE(rows[1].end_ns, 250);
        // A rank with step ranges keeps them and gets no whole-trace window.
        const std::vector<StepBreakdown> stepped = step_breakdown(two_ranks_without_workload());
        QCOMPARE(stepped.size(), std::size_t{2});
        for (const StepBreakdown& row : stepped) {
            QVERIFY(!row.whole_trace);
            QCOMPARE(row.step.value(), 0);
        }
    }

    // Stragglers come only from instances two ranks or more took part in: a rank cannot wait
    // for itself.
    void stragglersNeedTwoRanks() {
        RunTrace trace;
        add_rank(trace, 0, 0, 0, 0, 0);
        add_rank(trace, 1, 1, 0, 0, 0);
        trace.finish();
        CollectiveInstance alone;
        alone.participants = {{0, 0, 100, -1, {}}, {0, 50, 100, -1, {}}};
        CollectiveInstance together;
        together.participants = {{0, 0, 100, -1, {}}, {1, 40, 100, -1, {}}};
        const auto only_alone =
            analyze_imbalance(trace, {}, MatchedCollectives(trace, {alone}), nullptr);
        QVERIFY(only_alone.stragglers.empty());
        const auto result =
            analyze_imbalance(trace, {}, MatchedCollectives(trace, {alone, together}), nullptr);
        QCOMPARE(result.stragglers.size(), std::size_t{1});
        QCOMPARE(result.stragglers[0].rank, 1);
        QCOMPARE(result.stragglers[0].instances, 1);
        QCOMPARE(result.stragglers[0].caused_wait_ns, 40);
        // A single rank's collectives match nothing.
        RunTrace single;
        add_rank(single, 0, 0, 0, 0, 0);
        for (int k = 0; k < 3; ++k) {
            single.add_range(host(single, 0), "ncclAllReduce", Category::communication, k * 100,
                             k * 100 + 50, 0);
        }
        single.finish();
        QVERIFY(match_collectives(single).empty());
    }
};

QTEST_GUILESS_MAIN(UnknownFiguresTest)
#include "test_analysis_unknown_figures.moc"
