// The NCCL bootstrap without MPI (engine/comm/rendezvous.h): the launcher's environment, and a
// blob handed from rank 0 to every rank through a real file and a real TCP socket by real
// processes (fork), plus the errors a user meets — a rank 0 that never comes, a foreign file or
// server, a stale file, ranks of two launches, specs that make no sense.
#include <QTest>

#include <QTemporaryDir>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include "collectors/inject/rank_environment.h"
#include "engine/comm/rendezvous.h"

using namespace fulcrum;
using namespace fulcrum::engine;
using std::chrono::milliseconds;

namespace {

// Long enough for a loaded CI machine; only a broken rendezvous ever waits this long.
constexpr milliseconds kPatience(20000);
// For the tests whose point is the timeout itself.
constexpr milliseconds kShortTimeout(200);

EnvironmentLookup lookup_in(const QStringList& variables) {
    auto values = std::make_shared<std::map<std::string, std::string>>();
    for (const QString& variable : variables) {
        const auto equals = variable.indexOf('=');
        (*values)[variable.left(equals).toStdString()] = variable.mid(equals + 1).toStdString();
    }
    return [values](const char* name) -> const char* {
        const auto found = values->find(name);
        return found == values->end() ? nullptr : found->second.c_str();
    };
}

// What NCCL's unique id looks like to the rendezvous: 128 bytes, none of them special.
std::vector<std::byte> unique_id_like(int seed) {
    std::vector<std::byte> bytes(128);
    for (std::size_t i = 0; i < bytes.size(); ++i) {
        bytes[i] = std::byte((i * 37 + std::size_t(seed) * 11 + 5) & 0xff);
    }
    return bytes;
}

// A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick for port 0).
int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
        ::close(fd);
        return -1;
    }
    ::close(fd);
    return ntohs(address.sin_port);
}

std::string tcp_spec(int port) {
    return "tcp:127.0.0.1:" + std::to_string(port);
}

struct Outcome {
    bool ok = false;
    std::vector<std::byte> blob;
    std::string error;
};

// Runs rendezvous_exchange in `world` processes, one per rank, and returns what each got.
// Rank 0 starts last, so that the others have to wait for it; the ranks other than 0 pass a
// blob of their own, which the rendezvous must ignore.
std::vector<Outcome> exchange_in_processes(const std::string& spec, int world,
                                           const std::vector<std::byte>& blob) {
    std::vector<pid_t> children(std::size_t(world), -1);
    std::vector<int> pipes(std::size_t(world), -1);
    for (int rank = world - 1; rank >= 0; --rank) {
        int ends[2];
        if (::pipe(ends) != 0) {
            return {};
        }
        const pid_t pid = ::fork();
        if (pid == 0) {
            ::close(ends[0]);
            const auto own = rank == 0 ? blob : unique_id_like(100 + rank);
            auto got = rendezvous_exchange(spec, rank, world, own, kPatience);
            std::string message(1, got.ok() ? '1' : '0');
            if (got.ok()) {
                message.append(reinterpret_cast<const char*>(got->data()), got->size());
            } else {
                message += got.error().message;
            }
            std::size_t written = 0;
            while (written < message.size()) {
                const ssize_t n =
                    ::write(ends[1], message.data() + written, message.size() - written);
                if (n <= 0) {
                    break;
                }
                written += std::size_t(n);
            }
            ::_exit(0);  // no Qt, no atexit handlers of the test in the child
        }
        ::close(ends[1]);
        children[std::size_t(rank)] = pid;
        pipes[std::size_t(rank)] = ends[0];
    }
    std::vector<Outcome> outcomes(static_cast<std::size_t>(world));
    for (int rank = 0; rank < world; ++rank) {
        std::string message;
        char buffer[4096];
        ssize_t n;
        while ((n = ::read(pipes[std::size_t(rank)], buffer, sizeof buffer)) > 0) {
            message.append(buffer, std::size_t(n));
        }
        ::close(pipes[std::size_t(rank)]);
        ::waitpid(children[std::size_t(rank)], nullptr, 0);
        Outcome& outcome = outcomes[std::size_t(rank)];
        outcome.ok = !message.empty() && message[0] == '1';
        if (outcome.ok) {
            const auto* bytes = reinterpret_cast<const std::byte*>(message.data() + 1);
            outcome.blob.assign(bytes, bytes + message.size() - 1);
        } else {
            outcome.error = message.empty() ? "the process died" : message.substr(1);
        }
    }
    return outcomes;
}

#define VERIFY_ERROR_CONTAINS(result, expected_code, text)                             \
    do {                                                                               \
        QVERIFY2(!(result).ok(), "expected an error");                                 \
        QCOMPARE(int((result).error().code), int(expected_code));                      \
        QVERIFY2((result).error().message.find(text) != std::string::npos,             \
                 qPrintable(QStringLiteral("'%1' does not say '%2'")                   \
                                .arg(QString::fromStdString((result).error().message), \
                                     QString::fromStdString(std::string(text)))));     \
    } while (false)

}  // namespace

class RendezvousTest : public QObject {
    Q_OBJECT

private slots:
    void launchers_data();
    void launchers();
    void malformedLaunchers_data();
    void malformedLaunchers();
    void processEnvironment();
    void exchangeAcrossProcesses_data();
    void exchangeAcrossProcesses();
    void aloneReturnsAtOnce();
    void fileTimeoutNamesThePath();
    void tcpTimeoutNamesTheServer();
    void tcpServerNamesTheMissingRanks();
    void badSpecs_data();
    void badSpecs();
    void foreignServerIsDetected();
    void foreignFileIsDetected();
    void staleFileIsRefused();
    void twoLaunchesAreTold_data();
    void twoLaunchesAreTold();
};

void RendezvousTest::launchers_data() {
    QTest::addColumn<QStringList>("environment");
    QTest::addColumn<int>("rank");
    QTest::addColumn<int>("size");
    QTest::addColumn<int>("localRank");
    QTest::addColumn<QString>("source");
    QTest::newRow("mpirun inside a SLURM allocation") << QStringList{"OMPI_COMM_WORLD_RANK=3",
                                                                     "OMPI_COMM_WORLD_SIZE=8",
                                                                     "OMPI_COMM_WORLD_LOCAL_RANK=1",
                                                                     "SLURM_PROCID=0",
                                                                     "SLURM_NTASKS=2",
                                                                     "SLURM_LOCALID=0"}
                                                      << 3 << 8 << 1 << "Open MPI";
    QTest::newRow("torchrun") << QStringList{"RANK=5", "WORLD_SIZE=16", "LOCAL_RANK=5"} << 5 << 16
                              << 5 << "torchrun";
    QTest::newRow("srun torchrun: the node's SLURM_PROCID is not the rank")
        << QStringList{"RANK=6",         "WORLD_SIZE=16",  "LOCAL_RANK=6",
                       "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0"}
        << 6 << 16 << 6 << "torchrun";
    QTest::newRow("srun") << QStringList{"SLURM_PROCID=7", "SLURM_NTASKS=8", "SLURM_LOCALID=3"} << 7
                          << 8 << 3 << "SLURM";
    QTest::newRow("RANK without WORLD_SIZE is a job script's, not torchrun's")
        << QStringList{"RANK=2", "SLURM_PROCID=1", "SLURM_NTASKS=4", "SLURM_LOCALID=1"} << 1 << 4
        << 1 << "SLURM";
    QTest::newRow("no launcher") << QStringList{"RANK=3"} << 0 << 1 << 0 << "no launcher";
}

// The engine and `fulcrum capture` (collectors/inject/rank_environment.h) must name the same
// rank, or a trace's rows would carry another rank's label.
void RendezvousTest::launchers() {
    QFETCH(QStringList, environment);
    QFETCH(int, rank);
    QFETCH(int, size);
    QFETCH(int, localRank);
    QFETCH(QString, source);
    const auto lookup = lookup_in(environment);
    auto launch = launch_rank_from_environment(lookup);
    QVERIFY2(launch.ok(), launch.ok() ? "" : launch.error().message.c_str());
    QCOMPARE(launch->rank, rank);
    QCOMPARE(launch->world_size, size);
    QCOMPARE(launch->local_rank, localRank);
    QCOMPARE(QString::fromStdString(launch->source), source);
    const auto labelled = collect::rank_from_environment(lookup);
    QCOMPARE(labelled.rank, source == "no launcher" ? -1 : rank);
    QCOMPARE(labelled.world_size, source == "no launcher" ? -1 : size);
}

void RendezvousTest::malformedLaunchers_data() {
    QTest::addColumn<QStringList>("environment");
    QTest::addColumn<QString>("named");
    QTest::newRow("not a number, with a good launcher behind it")
        << QStringList{"OMPI_COMM_WORLD_RANK=x",
                       "OMPI_COMM_WORLD_SIZE=4",
                       "OMPI_COMM_WORLD_LOCAL_RANK=0",
                       "SLURM_PROCID=1",
                       "SLURM_NTASKS=4",
                       "SLURM_LOCALID=1"}
        << "OMPI_COMM_WORLD_RANK='x'";
    QTest::newRow("negative") << QStringList{"SLURM_PROCID=-1", "SLURM_NTASKS=4", "SLURM_LOCALID=0"}
                              << "SLURM_PROCID='-1'";
    QTest::newRow("trailing text")
        << QStringList{"RANK=1", "WORLD_SIZE=4 nodes", "LOCAL_RANK=1"} << "WORLD_SIZE='4 nodes'";
    QTest::newRow("empty") << QStringList{"OMPI_COMM_WORLD_RANK=0",
                                          "OMPI_COMM_WORLD_SIZE=", "OMPI_COMM_WORLD_LOCAL_RANK=0"}
                           << "OMPI_COMM_WORLD_SIZE=''";
    QTest::newRow("beyond int") << QStringList{"OMPI_COMM_WORLD_RANK=99999999999",
                                               "OMPI_COMM_WORLD_SIZE=4",
                                               "OMPI_COMM_WORLD_LOCAL_RANK=0"}
                                << "OMPI_COMM_WORLD_RANK='99999999999'";
    QTest::newRow("rank not below the size")
        << QStringList{"SLURM_PROCID=4", "SLURM_NTASKS=4", "SLURM_LOCALID=0"}
        << "SLURM_PROCID=4 is not below SLURM_NTASKS=4";
    QTest::newRow("local rank not below the size")
        << QStringList{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=2"}
        << "LOCAL_RANK=2 is not below WORLD_SIZE=2";
    QTest::newRow("size 0") << QStringList{"RANK=0", "WORLD_SIZE=0", "LOCAL_RANK=0"}
                            << "WORLD_SIZE=0";
    QTest::newRow("no size") << QStringList{"OMPI_COMM_WORLD_RANK=1"}
                             << "OMPI_COMM_WORLD_SIZE is not set";
    QTest::newRow("no local rank")
        << QStringList{"SLURM_PROCID=1", "SLURM_NTASKS=2"} << "SLURM_LOCALID is not set";
}

void RendezvousTest::malformedLaunchers() {
    QFETCH(QStringList, environment);
    QFETCH(QString, named);
    auto launch = launch_rank_from_environment(lookup_in(environment));
    VERIFY_ERROR_CONTAINS(launch, ErrorCode::invalid_input, named.toStdString());
}

// The default lookup reads this process's environment. Open MPI's variables come first, so
// whatever launcher ran this test cannot change the answer.
void RendezvousTest::processEnvironment() {
    const QList<QByteArray> names = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                     "OMPI_COMM_WORLD_LOCAL_RANK"};
    std::map<QByteArray, std::optional<QByteArray>> saved;
    for (const auto& name : names) {
        saved[name] = qEnvironmentVariableIsSet(name.constData())
                          ? std::optional(qgetenv(name.constData()))
                          : std::nullopt;
    }
    qputenv("OMPI_COMM_WORLD_RANK", "2");
    qputenv("OMPI_COMM_WORLD_SIZE", "3");
    qputenv("OMPI_COMM_WORLD_LOCAL_RANK", "0");
    auto launch = launch_rank_from_environment();
    for (const auto& [name, value] : saved) {
        value ? qputenv(name.constData(), *value) : qunsetenv(name.constData());
    }
    QVERIFY2(launch.ok(), launch.ok() ? "" : launch.error().message.c_str());
    QCOMPARE(launch->rank, 2);
    QCOMPARE(launch->world_size, 3);
    QCOMPARE(launch->local_rank, 0);
    QCOMPARE(launch->source, std::string("Open MPI"));
}

void RendezvousTest::exchangeAcrossProcesses_data() {
    QTest::addColumn<QString>("kind");
    QTest::newRow("file") << "file";
    QTest::newRow("tcp") << "tcp";
}

void RendezvousTest::exchangeAcrossProcesses() {
    QFETCH(QString, kind);
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string path = dir.filePath("nccl-id").toStdString();
    const int port = free_port();
    QVERIFY(port > 0);
    const std::string spec = kind == "file" ? "file:" + path : tcp_spec(port);
    const auto blob = unique_id_like(1);
    const auto outcomes = exchange_in_processes(spec, 4, blob);
    QCOMPARE(outcomes.size(), std::size_t(4));
    for (std::size_t rank = 0; rank < outcomes.size(); ++rank) {
        QVERIFY2(outcomes[rank].ok,
                 qPrintable(QStringLiteral("rank %1: %2")
                                .arg(rank)
                                .arg(QString::fromStdString(outcomes[rank].error))));
        QVERIFY2(outcomes[rank].blob == blob,
                 qPrintable(QStringLiteral("rank %1 got another blob").arg(rank)));
    }
    if (kind == "file") {
        // The file stays until rank 0 knows everyone has read it; then the path is free for
        // the next run, and nothing else (a temporary file) is left in the folder.
        QVERIFY(std::filesystem::exists(path));
        QVERIFY(rendezvous_cleanup(spec, 1).ok());
        QVERIFY(std::filesystem::exists(path));
        QVERIFY(rendezvous_cleanup(spec, 0).ok());
        QVERIFY(!std::filesystem::exists(path));
        QVERIFY(std::filesystem::is_empty(dir.path().toStdString()));
    }
}

void RendezvousTest::aloneReturnsAtOnce() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("nccl-id").toStdString();
    const auto blob = unique_id_like(2);
    auto got = rendezvous_exchange("file:" + path, 0, 1, blob, kPatience);
    QVERIFY2(got.ok(), got.ok() ? "" : got.error().message.c_str());
    QVERIFY(*got == blob);
    QVERIFY(!std::filesystem::exists(path));  // nobody to hand it to: no file written
    // Nobody listens either: a port that would fail to bind is never touched.
    got = rendezvous_exchange("tcp:no-such-host.invalid:1", 0, 1, blob, kPatience);
    QVERIFY2(got.ok(), got.ok() ? "" : got.error().message.c_str());
    QVERIFY(*got == blob);
}

void RendezvousTest::fileTimeoutNamesThePath() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("never-written").toStdString();
    auto got = rendezvous_exchange("file:" + path, 3, 4, {}, kShortTimeout);
    VERIFY_ERROR_CONTAINS(got, ErrorCode::io,
                          "rank 3 waited 0.2 s for the rendezvous file " + path +
                              " written by rank 0; is rank 0 running, and is the path on a "
                              "shared file system?");
}

void RendezvousTest::tcpTimeoutNamesTheServer() {
    const int port = free_port();
    QVERIFY(port > 0);
    auto got = rendezvous_exchange(tcp_spec(port), 1, 2, {}, kShortTimeout);
    const std::string server = "127.0.0.1:" + std::to_string(port);
    VERIFY_ERROR_CONTAINS(got, ErrorCode::io,
                          "rank 1 waited 0.2 s to reach the rendezvous server of rank 0 at " +
                              server + " (last error: Connection refused)");
}

void RendezvousTest::tcpServerNamesTheMissingRanks() {
    const int port = free_port();
    QVERIFY(port > 0);
    auto got = rendezvous_exchange(tcp_spec(port), 0, 3, unique_id_like(3), kShortTimeout);
    VERIFY_ERROR_CONTAINS(got, ErrorCode::io,
                          "rank 0 waited 0.2 s on port " + std::to_string(port) +
                              " for rank(s) 1, 2 of 3 to fetch the rendezvous id");
}

void RendezvousTest::badSpecs_data() {
    QTest::addColumn<QString>("spec");
    QTest::addColumn<QString>("problem");
    QTest::newRow("empty") << ""
                           << "not a rendezvous spec";
    QTest::newRow("a bare path") << "/shared/nccl-id"
                                 << "not a rendezvous spec";
    QTest::newRow("another scheme") << "udp:node0:29500"
                                    << "not a rendezvous spec";
    QTest::newRow("file without a path") << "file:"
                                         << "no path after 'file:'";
    QTest::newRow("tcp without a port") << "tcp:node0"
                                        << "no ':PORT' after the host";
    QTest::newRow("tcp without a host") << "tcp::29500"
                                        << "no host before the port";
    QTest::newRow("port 0") << "tcp:node0:0"
                            << "'0' is not a port";
    QTest::newRow("port too large") << "tcp:node0:65536"
                                    << "'65536' is not a port";
    QTest::newRow("port not a number") << "tcp:node0:29x"
                                       << "'29x' is not a port";
}

// Reported before anything else, even by a rank with nobody to wait for: the same typo would
// stop the first real multi-rank run.
void RendezvousTest::badSpecs() {
    QFETCH(QString, spec);
    QFETCH(QString, problem);
    const std::string text = spec.toStdString();
    for (const auto& [rank, world] : {std::pair{0, 1}, std::pair{1, 2}}) {
        auto got = rendezvous_exchange(text, rank, world, unique_id_like(4), kPatience);
        VERIFY_ERROR_CONTAINS(got, ErrorCode::invalid_input,
                              "rendezvous '" + text + "': " + problem.toStdString());
        VERIFY_ERROR_CONTAINS(got, ErrorCode::invalid_input, "use file:PATH");
    }
    auto cleanup = rendezvous_cleanup(text, 0);
    VERIFY_ERROR_CONTAINS(cleanup, ErrorCode::invalid_input, "rendezvous '" + text + "'");
}

// Something else owns the port (here: a web server's error page): the rank says so at once
// instead of waiting for an id that will never come or handing NCCL garbage.
void RendezvousTest::foreignServerIsDetected() {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    QVERIFY(::bind(listener, reinterpret_cast<sockaddr*>(&address), length) == 0);
    QVERIFY(::listen(listener, 1) == 0);
    QVERIFY(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    const int port = ntohs(address.sin_port);
    std::thread server([listener] {
        const int client = ::accept(listener, nullptr, nullptr);
        if (client >= 0) {
            char request[64];
            [[maybe_unused]] const ssize_t ignored = ::recv(client, request, sizeof request, 0);
            const char answer[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
            ::send(client, answer, sizeof answer - 1, MSG_NOSIGNAL);
            ::close(client);
        }
    });
    auto got = rendezvous_exchange(tcp_spec(port), 2, 4, {}, kPatience);
    server.join();
    ::close(listener);
    VERIFY_ERROR_CONTAINS(got, ErrorCode::corrupt,
                          "127.0.0.1:" + std::to_string(port) +
                              " is not a Fulcrum rendezvous server (it answered 'HTTP/1.1 400 "
                              "Bad'); is another program using port " +
                              std::to_string(port) + "?");
}

void RendezvousTest::foreignFileIsDetected() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("nccl-id").toStdString();
    std::ofstream(path) << "#!/bin/sh\necho not an id\n";
    auto got = rendezvous_exchange("file:" + path, 1, 2, {}, kPatience);
    VERIFY_ERROR_CONTAINS(got, ErrorCode::corrupt,
                          path + " is not a Fulcrum rendezvous file (it starts with '#!/bin/sh.");
}

// The file of an earlier run: ranks that started before rank 0 may already have read its id,
// so rank 0 stops with a message instead of replacing it (and leaves it as it was).
void RendezvousTest::staleFileIsRefused() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("nccl-id").toStdString();
    const std::string spec = "file:" + path;
    QVERIFY(rendezvous_exchange(spec, 0, 2, unique_id_like(5), kPatience).ok());
    auto again = rendezvous_exchange(spec, 0, 2, unique_id_like(6), kPatience);
    VERIFY_ERROR_CONTAINS(again, ErrorCode::io, "the rendezvous file " + path + " already exists");
    auto read = rendezvous_exchange(spec, 1, 2, {}, kPatience);
    QVERIFY2(read.ok(), read.ok() ? "" : read.error().message.c_str());
    QVERIFY(*read == unique_id_like(5));
}

void RendezvousTest::twoLaunchesAreTold_data() {
    QTest::addColumn<QString>("kind");
    QTest::newRow("file") << "file";
    QTest::newRow("tcp") << "tcp";
}

// Rank 0 of a 2-rank launch and a rank that believes in 3 ranks: both learn why, neither
// waits for the other until the timeout.
void RendezvousTest::twoLaunchesAreTold() {
    QFETCH(QString, kind);
    QTemporaryDir dir;
    const int port = free_port();
    QVERIFY(port > 0);
    const std::string spec =
        kind == "file" ? "file:" + dir.filePath("nccl-id").toStdString() : tcp_spec(port);
    Result<std::vector<std::byte>> served = Error{ErrorCode::cancelled, "not run"};
    std::thread rank0(
        [&] { served = rendezvous_exchange(spec, 0, 2, unique_id_like(7), kPatience); });
    if (kind == "file") {
        rank0.join();  // the file is there before the reader looks
    }
    auto got = rendezvous_exchange(spec, 1, 3, {}, kPatience);
    if (kind == "tcp") {
        rank0.join();
        VERIFY_ERROR_CONTAINS(served, ErrorCode::invalid_input,
                              "rank 1 runs in a world of 3 ranks, rank 0 in a world of 2");
    }
    VERIFY_ERROR_CONTAINS(got, ErrorCode::invalid_input, "world of 3");
    VERIFY_ERROR_CONTAINS(got, ErrorCode::invalid_input, "do all ranks come from one launch?");
}

QTEST_GUILESS_MAIN(RendezvousTest)
#include "test_rendezvous.moc"
