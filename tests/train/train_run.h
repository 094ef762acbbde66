// fulcrum-train run by a test: its exit code, output, every step's loss (--losses) and the
// parameters after training (--dump-parameters); and the check every layout is held to
// against the 1-rank run on the same documents (test_train_layouts' header says why 1e-5).
#pragma once

#include <QProcess>
#include <QStringList>
#include <QTest>

#include <cmath>
#include <fstream>
#include <vector>

#include "tests/train/mpi_environment.h"

namespace fulcrum::test {

struct TrainRun {
    int exit_code = -1;
    QString output;
    std::vector<double> losses;
    std::vector<float> parameters;
};

// `args` on `ranks` ranks (mpirun for more than one); the losses and parameters written to
// `directory` under `tag`. `refused`: every rank is expected to refuse its options and exit
// (mpi_environment_failing_fast).
inline TrainRun train(int ranks, QStringList args, const QString& directory, const QString& tag,
                      bool refused = false) {
    const QString train_binary = QStringLiteral(FULCRUM_BINARY_DIR "/engine/fulcrum-train");
    const QString losses = directory + "/" + tag + ".losses";
    const QString parameters = directory + "/" + tag + ".params";
    args << "--losses" << losses << "--dump-parameters" << parameters;
    QProcess process;
    process.setProcessEnvironment(refused ? mpi_environment_failing_fast() : mpi_environment());
    process.setProcessChannelMode(QProcess::MergedChannels);
    if (ranks == 1) {
        process.start(train_binary, args);
    } else {
        process.start(FULCRUM_MPIRUN,
                      QStringList{"-np", QString::number(ranks), train_binary} + args);
    }
    TrainRun run;
    if (!process.waitForFinished(300'000)) {
        run.output = "timed out";
        return run;
    }
    run.exit_code = process.exitCode();
    run.output = QString::fromUtf8(process.readAll());
    std::ifstream loss_file(losses.toStdString());
    for (double loss; loss_file >> loss;) {
        run.losses.push_back(loss);
    }
    std::ifstream parameter_file(parameters.toStdString(), std::ios::binary | std::ios::ate);
    if (parameter_file) {
        run.parameters.resize(static_cast<std::size_t>(parameter_file.tellg()) / sizeof(float));
        parameter_file.seekg(0);
        parameter_file.read(reinterpret_cast<char*>(run.parameters.data()),
                            static_cast<std::streamsize>(run.parameters.size() * sizeof(float)));
    }
    return run;
}

// Three steps' losses and the weights after them within 1e-5 relative of the 1-rank run's,
// and training did move them (the check is not comparing two initialisations). The caller
// stops on QTest::currentTestFailed().
inline void check_matches_serial(const TrainRun& run, const TrainRun& serial) {
    QCOMPARE(run.losses.size(), 3u);
    QCOMPARE(serial.losses.size(), 3u);
    for (std::size_t s = 0; s < 3; ++s) {
        const double relative =
            std::abs(run.losses[s] - serial.losses[s]) / std::abs(serial.losses[s]);
        QVERIFY2(relative <= 1e-5, qPrintable(QString("step %1: loss %2 vs %3")
                                                  .arg(s)
                                                  .arg(run.losses[s], 0, 'g', 9)
                                                  .arg(serial.losses[s], 0, 'g', 9)));
    }
    QCOMPARE(run.parameters.size(), serial.parameters.size());
    QVERIFY(!serial.parameters.empty());
    double difference = 0, norm = 0;
    for (std::size_t i = 0; i < serial.parameters.size(); ++i) {
        const double d = double(run.parameters[i]) - double(serial.parameters[i]);
        difference += d * d;
        norm += double(serial.parameters[i]) * serial.parameters[i];
    }
    const double relative = std::sqrt(difference / norm);
    QVERIFY2(relative <= 1e-5, qPrintable(QString("weights differ by %1").arg(relative)));
    QVERIFY(run.losses[2] < run.losses[0]);
}

}  // namespace fulcrum::test
