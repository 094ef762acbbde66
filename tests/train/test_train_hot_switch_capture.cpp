// A real capture of a hot-switched run: `fulcrum capture -- mpirun -np 2 fulcrum-train
// --hot-switch 0-48:dp2;48-:tp2`, then `fulcrum analyze` of it shows HotSPa's breakdown (a row
// per bucket under its layout, 'others' the switching) and the switch-cost matrix, from the
// `hot-switch bucket` and `hot-switch` ranges the engine writes (docs/annotations.md, "Hot
// switching"); and the switch ranges carry the bytes every rank sent to each peer.
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <set>
#include <tuple>

#include "core/store/trace_reader.h"
#include "core/trace/annotations.h"
#include "tests/train/mpi_environment.h"

using namespace fulcrum;

class TrainHotSwitchCaptureTest : public QObject {
    Q_OBJECT

    QTemporaryDir work_;
    QString run_path_;

    QString fulcrum(const QStringList& args, int& exit_code) {
        QProcess process;
        process.setProcessEnvironment(mpi_environment());
        process.setProcessChannelMode(QProcess::MergedChannels);
        process.start(FULCRUM_BINARY_DIR "/app/fulcrum", args);
        if (!process.waitForFinished(300'000)) {
            exit_code = -1;
            return "timed out";
        }
        exit_code = process.exitCode();
        return QString::fromUtf8(process.readAll());
    }

private slots:
    void initTestCase() {
        const QString capture_dir = work_.filePath("capture");
        int exit_code = 0;
        const QString output = fulcrum({"capture",
                                        "-o",
                                        capture_dir,
                                        "--",
                                        FULCRUM_MPIRUN,
                                        "-np",
                                        "2",
                                        FULCRUM_BINARY_DIR "/engine/fulcrum-train",
                                        "--hot-switch",
                                        "0-48:dp2;48-:tp2",
                                        "--lengths",
                                        "lognormal:median=40,sigma=0.9",
                                        "--context",
                                        "128",
                                        "--micro-batches",
                                        "2",
                                        "--layers",
                                        "2",
                                        "--hidden",
                                        "32",
                                        "--documents",
                                        "200",
                                        "--steps",
                                        "3"},
                                       exit_code);
        QVERIFY2(exit_code == 0, qPrintable(output));
        run_path_ = capture_dir + "/run.fulcrum";
    }

    void analyzeShowsTheBucketsAndTheSwitches() {
        int exit_code = 0;
        const QString output = fulcrum({"analyze", run_path_}, exit_code);
        QVERIFY2(exit_code == 0, qPrintable(output));
        QVERIFY2(output.contains("hot switching (3 steps"), qPrintable(output));
        const auto table = output.mid(output.indexOf("hot switching"));
        QVERIFY2(table.contains(QRegularExpression("0-48 +dp2 ")), qPrintable(table));
        QVERIFY2(table.contains(QRegularExpression("48- +tp2 ")), qPrintable(table));
        QVERIFY2(table.contains("others (switching)"), qPrintable(table));
        // The matrix. dp2 → tp2 moves nothing (every rank holds the whole model under dp2 and
        // keeps its TP slice: a local copy, no range); tp2 → dp2 takes the gradients home,
        // each rank getting the other's slice.
        const auto matrix = table.mid(table.indexOf("switch cost"));
        QVERIFY2(matrix.contains(QRegularExpression("dp2 +-\\n")), qPrintable(matrix));
        QVERIFY2(matrix.contains(QRegularExpression("tp2 +[0-9.]+ [mµu]?s / [0-9.]+ [KM]iB")),
                 qPrintable(matrix));
    }

    void switchesSayWhatEachRankSentToEachPeer() {
        auto trace = store::TraceReader::open(run_path_.toStdString());
        QVERIFY2(trace.ok(), trace.ok() ? "" : trace.error().message.c_str());
        const auto rows = trace->event_rowids();
        QVERIFY(rows.ok());
        std::vector<Event> events;
        QVERIFY(trace
                    ->scan_events(rows->first, rows->second,
                                  [&](const Event& event) {
                                      events.push_back(event);
                                      return true;
                                  })
                    .ok());
        int switches = 0;
        for (const Event& event : events) {
            if (trace->string(event.name) != range_name::kHotSwitch) {
                continue;
            }
            ++switches;
            const auto args = nlohmann::json::parse(trace->string(event.args));
            const double sent = std::stod(args.at("sent").get<std::string>());
            const auto sent_to = nlohmann::json::parse(args.at("sent_to").get<std::string>());
            double to_peers = 0;
            for (const auto& [peer, bytes] : sent_to.items()) {
                to_peers += bytes.get<double>();
            }
            QCOMPARE(to_peers, sent);
            QCOMPARE(double(event.bytes), sent + std::stod(args.at("received").get<std::string>()));
            QVERIFY(event.step >= 0);
        }
        // tp2 → dp2 on both ranks in every step with long documents; at least two do.
        QVERIFY2(switches >= 4, qPrintable(QString::number(switches)));
        // Micro-batches are numbered on through a step's buckets: one forward pass per
        // (lane, step, micro-batch), none renumbered from 0 by the second bucket.
        std::set<std::tuple<std::int64_t, int, int>> forwards;
        for (const Event& event : events) {
            if (trace->string(event.name) == range_name::kForward) {
                QVERIFY(forwards.insert({event.lane.value, event.step, event.microbatch}).second);
            }
        }
        QVERIFY(!forwards.empty());
    }
};

QTEST_GUILESS_MAIN(TrainHotSwitchCaptureTest)
#include "test_train_hot_switch_capture.moc"
