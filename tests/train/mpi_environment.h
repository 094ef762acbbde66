// The environment mpirun needs on these machines: root, more ranks than cores.
#pragma once

#include <QProcessEnvironment>

inline QProcessEnvironment mpi_environment() {
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert("OMPI_ALLOW_RUN_AS_ROOT", "1");
    env.insert("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    env.insert("OMPI_MCA_rmaps_base_oversubscribe", "1");
    // More ranks than cores: waiting ranks must yield or busy polling starves the others.
    env.insert("OMPI_MCA_mpi_yield_when_idle", "1");
    return env;
}
