// The `fulcrum` NVTX annotation scheme (docs/annotations.md) on plain strings: messages to
// semantic columns, metadata marks to rows, launcher variables to a rank.
#include <QTest>

#include <map>

#include "collectors/inject/rank_environment.h"
#include "collectors/inject/wide_text.h"
#include "core/trace/annotations.h"

using namespace fulcrum;
using namespace fulcrum::collect;

class CollectAnnotationsTest : public QObject {
    Q_OBJECT

private slots:
    void rangeMessages_data() {
        QTest::addColumn<QString>("message");
        QTest::addColumn<QString>("name");
        QTest::addColumn<int>("step");
        QTest::addColumn<int>("microbatch");
        QTest::addColumn<int>("stage");
        QTest::addColumn<int>("phase");
        QTest::addColumn<qlonglong>("bytes");
        QTest::addColumn<QString>("args");

        QTest::newRow("name only") << "optimizer"
                                   << "optimizer" << -1 << -1 << -1 << -1 << qlonglong(-1) << "";
        QTest::newRow("all keys") << "forward step=3 mb=1 stage=2 phase=fwd"
                                  << "forward" << 3 << 1 << 2 << 0 << qlonglong(-1) << "";
        QTest::newRow("name with spaces, bytes")
            << "send activations step=0 mb=7 stage=1 bytes=4096"
            << "send activations" << 0 << 7 << 1 << -1 << qlonglong(4096) << "";
        QTest::newRow("backward and weight grad")
            << "backward step=1 phase=wgrad"
            << "backward" << 1 << -1 << -1 << 2 << qlonglong(-1) << "";
        // The model chunk of a pass (docs/annotations.md): into args as an integer, first.
        QTest::newRow("weight gradients of chunk 1")
            << "weight gradients step=4 mb=2 stage=0 phase=wgrad chunk=1"
            << "weight gradients" << 4 << 2 << 0 << 2 << qlonglong(-1) << R"({"chunk":1})";
        QTest::newRow("chunk with other keys")
            << "forward step=0 mb=0 stage=1 phase=fwd chunk=0 layer=3"
            << "forward" << 0 << 0 << 1 << 0 << qlonglong(-1) << R"({"chunk":0,"layer":"3"})";
        QTest::newRow("a chunk that does not parse stays text")
            << "forward chunk=first"
            << "forward" << -1 << -1 << -1 << -1 << qlonglong(-1) << R"({"chunk":"first"})";
        QTest::newRow("other keys go to args")
            << "attention step=2 layer=11 kernel=flash"
            << "attention" << 2 << -1 << -1 << -1 << qlonglong(-1)
            << R"({"layer":"11","kernel":"flash"})";
        QTest::newRow("unparseable values are kept in args")
            << "mlp step=x phase=sideways"
            << "mlp" << -1 << -1 << -1 << -1 << qlonglong(-1)
            << R"({"step":"x","phase":"sideways"})";
        QTest::newRow("a value with spaces")
            << "note step=1 text=two words"
            << "note" << 1 << -1 << -1 << -1 << qlonglong(-1) << R"({"text":"two words"})";
        QTest::newRow("negative numbers are not keys' values")
            << "forward step=-1"
            << "forward" << -1 << -1 << -1 << -1 << qlonglong(-1) << R"({"step":"-1"})";
        QTest::newRow("empty") << ""
                               << "" << -1 << -1 << -1 << -1 << qlonglong(-1) << "";
    }

    void rangeMessages() {
        QFETCH(QString, message);
        QFETCH(QString, name);
        QFETCH(int, step);
        QFETCH(int, microbatch);
        QFETCH(int, stage);
        QFETCH(int, phase);
        QFETCH(qlonglong, bytes);
        QFETCH(QString, args);
        const RangeAnnotation a = parse_range_message(message.toStdString());
        QCOMPARE(QString::fromStdString(a.name), name);
        QCOMPARE(a.step, step);
        QCOMPARE(a.microbatch, microbatch);
        QCOMPARE(int(a.stage), stage);
        QCOMPARE(int(a.phase), phase);
        QCOMPARE(qlonglong(a.bytes), bytes);
        QCOMPARE(QString::fromStdString(a.args_json), args);
        // What the store keeps (args) gives the chunk back.
        QCOMPARE(chunk_of_args(a.args_json), a.chunk);
    }

    void categories() {
        QCOMPARE(category_from_nvtx(0), Category::other);
        QCOMPARE(category_from_nvtx(3), Category::communication);
        QCOMPARE(category_from_nvtx(8), Category::schedule);
        QCOMPARE(category_from_nvtx(9), Category::other);
        QCOMPARE(category_from_nvtx(0xFFFFFFFFu), Category::other);
    }

    void markMessages() {
        auto mark = split_mark_message("fulcrum.rank {\"rank\":5}");
        QCOMPARE(std::string(mark.name), std::string("fulcrum.rank"));
        QCOMPARE(std::string(mark.json), std::string("{\"rank\":5}"));
        mark = split_mark_message("fulcrum.clock_sync");
        QCOMPARE(std::string(mark.name), std::string(kClockSyncMark));
        QVERIFY(mark.json.empty());
    }

    void rankMark() {
        auto mark =
            parse_rank_mark(R"({"rank":5,"world":8,"dp":1,"pp":0,"cp":1,"tp":0,"device":-1})");
        QVERIFY(mark.ok());
        QCOMPARE(mark->rank, 5);
        QCOMPARE(mark->world, 8);
        QCOMPARE(mark->dp, 1);
        QCOMPARE(mark->pp, 0);
        QCOMPARE(mark->cp, 1);
        QCOMPARE(mark->tp, 0);
        QCOMPARE(mark->device, -1);
        QVERIFY(!parse_rank_mark(R"({"world":8})").ok());
        QVERIFY(!parse_rank_mark("not json").ok());
        QVERIFY(!parse_rank_mark("[1,2]").ok());
    }

    void runMark() {
        auto config = parse_run_mark(R"({ "model": "tiny", "dp": 2 })");
        QVERIFY(config.ok());
        QCOMPARE(*config, std::string(R"({"dp":2,"model":"tiny"})"));
        QVERIFY(!parse_run_mark("{broken").ok());
    }

    void workloadMark() {
        auto entries = parse_workload_mark(
            R"({"step":3,"balancer":"wlb","microbatches":[[[7,100,0,50],[8,20,0,20]],[[9,300,100,200]]]})",
            4);
        QVERIFY(entries.ok());
        QCOMPARE(entries->size(), std::size_t(3));
        const WorkloadEntry& last = entries->back();
        QCOMPARE(last.rank, 4);
        QCOMPARE(last.step, 3);
        QCOMPARE(last.microbatch, 1);
        QCOMPARE(last.doc_id, std::int64_t(9));
        QCOMPARE(last.doc_length, 300);
        QCOMPARE(last.token_begin, 100);
        QCOMPARE(last.token_end, 200);
        QCOMPARE(last.balancer, std::string("wlb"));
        QCOMPARE((*entries)[1].microbatch, 0);

        auto malformed = parse_workload_mark(R"({"step":1,"microbatches":[[[1,2,3]]]})", 0);
        QVERIFY(!malformed.ok());
        QVERIFY2(malformed.error().message.find("[1,2,3]") != std::string::npos,
                 malformed.error().message.c_str());
        QVERIFY(!parse_workload_mark(R"({"microbatches":[]})", 0).ok());
    }

    void ranksFromLaunchers_data() {
        QTest::addColumn<QStringList>("variables");
        QTest::addColumn<int>("rank");
        QTest::addColumn<QString>("source");
        QTest::newRow("nothing") << QStringList{} << -1 << "";
        QTest::newRow("open mpi") << QStringList{"OMPI_COMM_WORLD_RANK=3", "SLURM_PROCID=0"} << 3
                                  << "OMPI_COMM_WORLD_RANK";
        QTest::newRow("torchrun under srun")
            << QStringList{"RANK=5", "WORLD_SIZE=8", "SLURM_PROCID=1"} << 5 << "RANK";
        QTest::newRow("RANK without WORLD_SIZE is not torchrun's")
            << QStringList{"RANK=5", "SLURM_PROCID=1"} << 1 << "SLURM_PROCID";
        QTest::newRow("srun") << QStringList{"SLURM_PROCID=7"} << 7 << "SLURM_PROCID";
        QTest::newRow("garbage is ignored")
            << QStringList{"OMPI_COMM_WORLD_RANK=x", "PMI_RANK=2"} << 2 << "PMI_RANK";
    }

    void ranksFromLaunchers() {
        QFETCH(QStringList, variables);
        QFETCH(int, rank);
        QFETCH(QString, source);
        std::map<std::string, std::string> environment;
        for (const auto& variable : variables) {
            const auto parts = variable.split('=');
            environment[parts[0].toStdString()] = parts[1].toStdString();
        }
        const LauncherRank found = rank_from_environment([&](const char* name) -> const char* {
            auto it = environment.find(name);
            return it == environment.end() ? nullptr : it->second.c_str();
        });
        QCOMPARE(found.rank, rank);
        QCOMPARE(QString::fromStdString(found.variable), source);
    }

    // mpirun and its daemons inherit the capture's environment but are not ranks.
    void launchersAreNotRanks() {
        for (const char* launcher : {"orted", "prted", "mpirun", "orterun", "slurmstepd"}) {
            QVERIFY2(is_launcher_program(launcher), launcher);
        }
        for (const char* program : {"fulcrum-train", "python3", "orted2", ""}) {
            QVERIFY2(!is_launcher_program(program), program);
        }
    }

    // The engine writes range messages with format_range_message; what it writes is read back
    // whole, and keys not set are left out.
    void rangeMessagesRoundTrip() {
        RangeAnnotation written;
        written.name = "weight gradients";
        written.step = 12;
        written.microbatch = 3;
        written.stage = 1;
        written.phase = Phase::weight_grad;
        written.chunk = 2;
        written.bytes = 4096;
        const std::string message = format_range_message(written);
        QCOMPARE(
            message,
            std::string("weight gradients step=12 mb=3 stage=1 phase=wgrad chunk=2 bytes=4096"));
        const RangeAnnotation read = parse_range_message(message);
        QCOMPARE(read.name, written.name);
        QCOMPARE(read.step, written.step);
        QCOMPARE(read.microbatch, written.microbatch);
        QCOMPARE(read.stage, written.stage);
        QCOMPARE(read.phase, written.phase);
        QCOMPARE(read.chunk, written.chunk);
        QCOMPARE(read.bytes, written.bytes);
        RangeAnnotation bare;
        bare.name = "optimizer";
        QCOMPARE(format_range_message(bare), std::string("optimizer"));
    }

    void semanticKeysRoundTrip() {
        const auto keys = unpack_semantic_keys(pack_semantic_keys(1234, 7, 3, Phase::backward));
        QCOMPARE(keys.step, 1234);
        QCOMPARE(keys.microbatch, 7);
        QCOMPARE(keys.stage, std::int16_t(3));
        QCOMPARE(keys.phase, Phase::backward);
        const auto unknown = unpack_semantic_keys(pack_semantic_keys(5, -1, -1, Phase::none));
        QCOMPARE(unknown.step, 5);
        QCOMPARE(unknown.microbatch, -1);
        QCOMPARE(unknown.stage, std::int16_t(-1));
        QCOMPARE(unknown.phase, Phase::none);
        // Too large for its 16 bits: unknown rather than wrong.
        QCOMPARE(unpack_semantic_keys(pack_semantic_keys(0, 70000, 0, Phase::forward)).microbatch,
                 -1);
    }

    void wideMessages() {
        QCOMPARE(utf8_from_wide(L"wide \u00b5s \u6b65"),
                 std::string("wide \xc2\xb5s \xe6\xad\xa5"));
        QCOMPARE(utf8_from_wide(nullptr), std::string());
    }
};

QTEST_GUILESS_MAIN(CollectAnnotationsTest)
#include "test_collect_annotations.moc"
