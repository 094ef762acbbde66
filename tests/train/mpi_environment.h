// The environment mpirun needs on these machines: root, more ranks than cores.
#pragma once

#include <QCoreApplication>
#include <QDir>
#include <QProcessEnvironment>

#include <atomic>

inline QProcessEnvironment mpi_environment() {
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert("OMPI_ALLOW_RUN_AS_ROOT", "1");
    env.insert("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    env.insert("OMPI_MCA_rmaps_base_oversubscribe", "1");
    // More ranks than cores: waiting ranks must yield or busy polling starves the others.
    env.insert("OMPI_MCA_mpi_yield_when_idle", "1");
    // Each launch its own Open MPI session folder under the suite's (tests/CMakeLists.txt): a
    // 1-rank run is an MPI singleton, whose helper daemon removes the session's top folder as
    // it exits, and that can fall between the next launch making the folder and making its own
    // inside it ("A call to mkdir was unable to create the desired directory ... No such file
    // or directory", seen on test_train_hot_switch under ctest -j2).
    if (const QString base = env.value("OMPI_MCA_orte_tmpdir_base"); !base.isEmpty()) {
        static std::atomic<int> launches{0};
        const QString own =
            QString("%1/%2-%3").arg(base).arg(QCoreApplication::applicationPid()).arg(launches++);
        QDir().mkpath(own);
        env.insert("OMPI_MCA_orte_tmpdir_base", own);
    }
    return env;
}

// For a job whose ranks all refuse their options and exit: Open MPI then stops the job at once
// instead of granting each rank a second between SIGTERM and SIGKILL (odls_base_sigkill_timeout,
// 2 s of each such launch). Not for a job where a rank dies and the others must end cleanly.
inline QProcessEnvironment mpi_environment_failing_fast() {
    auto env = mpi_environment();
    env.insert("OMPI_MCA_odls_base_sigkill_timeout", "0");
    return env;
}
