// The simulator's communication against the engine's own: a real capture of fulcrum-train
// (tp 2 × pp 2, sequence parallelism, ZB-H1) and the simulation of the same settings
// (config_from_run) move the same bytes in the same number of calls, collective by
// collective: TP all-gathers and reduce-scatters (forward, B and W, layer_costs.h) and
// pipeline sends (and receives, per call). The ranges' bytes are what the engine's
// communicator is handed (engine/model/tensor_parallel.cpp,
// engine/distributed/parallel_trainer.cpp). Micro-batches are full (one context-long document
// each), so every TP rank holds whole rows.
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <map>

#include "core/analysis/run_trace.h"
#include "core/sim/simulator.h"
#include "core/store/trace_reader.h"
#include "tests/train/mpi_environment.h"

using namespace fulcrum;

namespace {

struct Traffic {
    std::int64_t bytes = 0;
    std::int64_t calls = 0;
};

// Bytes and calls by range name over every rank; a simulated range stands for args "calls".
std::map<std::string, Traffic> traffic_of(const std::string& path) {
    std::map<std::string, Traffic> traffic;
    auto reader = store::TraceReader::open(path);
    if (!reader)
        qFatal("%s", reader.error().message.c_str());
    for (const auto& rank : reader->ranks()) {
        for (const auto& lane : reader->lanes_of_rank(rank.rank)) {
            const auto status = reader->for_each_event(lane.id, [&](const Event& e) {
                if (e.bytes < 0) {
                    return true;
                }
                Traffic& t = traffic[std::string(reader->string(e.name))];
                t.bytes += e.bytes;
                const std::string args(reader->string(e.args));
                const auto at = args.find("\"calls\":\"");
                t.calls += at == std::string::npos ? 1 : std::stoll(args.substr(at + 9));
                return true;
            });
            if (!status.ok())
                qFatal("%s", status.error().message.c_str());
        }
    }
    return traffic;
}

}  // namespace

class SimulatorEngineBytesTest : public QObject {
    Q_OBJECT

    QTemporaryDir work_;

private slots:
    void bytesPerCollectiveAreTheEngines() {
        QProcess process;
        process.setProcessEnvironment(mpi_environment());
        process.setProcessChannelMode(QProcess::MergedChannels);
        const QString capture_dir = work_.filePath("capture");
        process.start(FULCRUM_BINARY_DIR "/app/fulcrum",
                      {"capture",
                       "-o",
                       capture_dir,
                       "--",
                       FULCRUM_MPIRUN,
                       "-np",
                       "4",
                       FULCRUM_BINARY_DIR "/engine/fulcrum-train",
                       "--tp",
                       "2",
                       "--pp",
                       "2",
                       "--sequence-parallel",
                       "--schedule",
                       "zb-h1",
                       "--lengths",
                       "lognormal:median=4096,sigma=0.01",
                       "--documents",
                       "64",
                       "--context",
                       "64",
                       "--micro-batches",
                       "4",
                       "--layers",
                       "4",
                       "--hidden",
                       "32",
                       "--steps",
                       "2"});
        QVERIFY(process.waitForFinished(300'000));
        QVERIFY2(process.exitCode() == 0, process.readAll().constData());
        const std::string captured = (capture_dir + "/run.fulcrum").toStdString();

        auto reader = store::TraceReader::open(captured);
        QVERIFY(reader.ok());
        auto trace = analysis::load_run_trace(*reader);
        QVERIFY(trace.ok());
        auto settings = sim::config_from_run(*trace);
        QVERIFY2(settings.ok(), settings.ok() ? "" : settings.error().message.c_str());
        QVERIFY(settings->config.layout.sequence_parallel);
        QCOMPARE(settings->config.layout.schedule, parallel::PipelineSchedule::zero_bubble_h1);
        sim::SimulationOutput output;
        output.path = work_.filePath("simulated.fulcrum").toStdString();
        auto simulated = sim::simulate_to_file(settings->config, output);
        QVERIFY2(simulated.ok(), simulated.ok() ? "" : simulated.error().message.c_str());

        const auto engine = traffic_of(captured);
        const auto played = traffic_of(output.path);
        for (const char* name :
             {"tp all-gather", "tp reduce-scatter", "send activations", "send gradients"}) {
            QVERIFY2(engine.contains(name), name);
            QVERIFY2(played.contains(name), name);
            const Traffic& e = engine.at(name);
            const Traffic& p = played.at(name);
            QVERIFY2(e.bytes == p.bytes && e.calls == p.calls,
                     qPrintable(QString("%1: engine %2 bytes in %3 calls, simulated %4 in %5")
                                    .arg(name)
                                    .arg(e.bytes)
                                    .arg(e.calls)
                                    .arg(p.bytes)
                                    .arg(p.calls)));
        }
        // The simulator leaves out receives that waited 0 ns (docs/simulate.md, "Output"):
        // those it writes carry what the engine's do.
        for (const char* name : {"recv activations", "recv gradients"}) {
            QVERIFY2(played.contains(name), name);
            QCOMPARE(played.at(name).bytes * engine.at(name).calls,
                     engine.at(name).bytes * played.at(name).calls);
        }
    }
};

QTEST_GUILESS_MAIN(SimulatorEngineBytesTest)
#include "test_sim_engine_bytes.moc"
