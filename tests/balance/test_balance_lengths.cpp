// Length distributions: the same seed gives the same epoch everywhere, the samplers have the
// shape their parameters promise, and bad specs and files are rejected with a message that
// names the problem.
#include "core/balance/lengths.h"

#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cmath>
#include <fstream>

using namespace fulcrum;
using namespace fulcrum::balance;

namespace {

const std::string kData = std::string(FULCRUM_SOURCE_DIR) + "/tests/balance/data/";

std::vector<std::int64_t> sample(std::string_view spec, std::size_t count, std::uint64_t seed,
                                 std::int64_t max_length) {
    auto distribution = parse_length_spec(spec);
    if (!distribution) {
        qFatal("%s", distribution.error().message.c_str());
    }
    auto lengths = sample_lengths(*distribution, count, seed, max_length);
    if (!lengths) {
        qFatal("%s", lengths.error().message.c_str());
    }
    return std::move(lengths).value();
}

double median_of(std::vector<std::int64_t> values) {
    std::sort(values.begin(), values.end());
    return static_cast<double>(values[values.size() / 2]);
}

}  // namespace

class TestBalanceLengths : public QObject {
    Q_OBJECT

private slots:
    void sameSeedSameLengths_data() {
        QTest::addColumn<QString>("spec");
        // clang-format off
        QTest::newRow("lognormal") << "lognormal:median=1900,sigma=0.9";
        QTest::newRow("long-tail") << "long-tail:context=32768";
        // clang-format on
    }
    void sameSeedSameLengths() {
        QFETCH(QString, spec);
        const auto first = sample(spec.toStdString(), 5000, 42, 1 << 20);
        QCOMPARE(sample(spec.toStdString(), 5000, 42, 1 << 20), first);
        QVERIFY(sample(spec.toStdString(), 5000, 43, 1 << 20) != first);
    }

    // Pinned values: mt19937_64 and our transforms are specified to the bit, so a change here
    // means the sampler changed and every recorded benchmark with it.
    void pinnedFirstLengths() {
        const std::vector<std::int64_t> expected{2606, 5049, 3866, 4703, 878, 1318, 2518, 1902};
        QCOMPARE(sample("lognormal:median=1900,sigma=0.9", 8, 1, 1 << 20), expected);
    }

    void lognormalHasItsMedianAndSigma() {
        const auto lengths = sample("lognormal:median=1900,sigma=0.9", 40000, 7, 1 << 30);
        QVERIFY(std::abs(median_of(lengths) / 1900.0 - 1.0) < 0.03);
        double sum = 0;
        double sum_squares = 0;
        for (const auto length : lengths) {
            const double log_length = std::log(static_cast<double>(length));
            sum += log_length;
            sum_squares += log_length * log_length;
        }
        const double mean = sum / static_cast<double>(lengths.size());
        const double sigma =
            std::sqrt(sum_squares / static_cast<double>(lengths.size()) - mean * mean);
        QVERIFY2(std::abs(sigma - 0.9) < 0.02, qPrintable(QString::number(sigma)));
    }

    // docs/sources.md, "Document lengths": a fraction of a percent of documents carries most of
    // Σd².
    void longTailCarriesMostAttentionWork() {
        const std::int64_t context = 65536;
        auto lengths = sample("long-tail:context=65536", 100000, 3, context);
        QVERIFY(*std::max_element(lengths.begin(), lengths.end()) <= context);
        QVERIFY(*std::min_element(lengths.begin(), lengths.end()) >= 1);
        std::sort(lengths.begin(), lengths.end(), std::greater<>());
        double total = 0;
        for (const auto d : lengths) {
            total += static_cast<double>(d) * static_cast<double>(d);
        }
        double top = 0;
        for (std::size_t i = 0; i < lengths.size() / 100; ++i) {
            top += static_cast<double>(lengths[i]) * static_cast<double>(lengths[i]);
        }
        QVERIFY2(top / total > 0.5, qPrintable(QString::number(top / total)));
    }

    void lengthsClampToMaxLength_data() {
        QTest::addColumn<QString>("spec");
        // clang-format off
        QTest::newRow("lognormal") << "lognormal:median=1900,sigma=2";
        QTest::newRow("long-tail beyond max") << "long-tail:context=65536,tail=0.5";
        // clang-format on
    }
    void lengthsClampToMaxLength() {
        QFETCH(QString, spec);
        const auto lengths = sample(spec.toStdString(), 20000, 5, 4096);
        QCOMPARE(*std::max_element(lengths.begin(), lengths.end()), std::int64_t{4096});
        QVERIFY(*std::min_element(lengths.begin(), lengths.end()) >= 1);
    }

    void specRoundTrips_data() {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<QString>("canonical");
        // clang-format off
        QTest::newRow("lognormal") << "lognormal:median=1900,sigma=0.9"
                                   << "lognormal:median=1900,sigma=0.9";
        QTest::newRow("lognormal defaults") << "lognormal" << "lognormal:median=1900,sigma=0.9";
        QTest::newRow("long-tail") << "long-tail:context=32768"
                                   << "long-tail:context=32768,median=1900,sigma=0.9,tail=0.01";
        QTest::newRow("long-tail spaced") << "long-tail: context = 131072 , tail=0.02"
                                          << "long-tail:context=131072,median=1900,sigma=0.9,"
                                             "tail=0.02";
        QTest::newRow("file") << "file:/data/lengths.txt" << "file:/data/lengths.txt";
        // clang-format on
    }
    void specRoundTrips() {
        QFETCH(QString, spec);
        QFETCH(QString, canonical);
        auto parsed = parse_length_spec(spec.toStdString());
        QVERIFY2(parsed.ok(), parsed.ok() ? "" : parsed.error().message.c_str());
        QCOMPARE(QString::fromStdString(length_spec(*parsed)), canonical);
    }

    void badSpecNamesTheProblem_data() {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<QString>("message");
        // clang-format off
        QTest::newRow("unknown kind") << "gamma:shape=2" << "unknown length distribution 'gamma'";
        QTest::newRow("empty") << "" << "expected lognormal:median=M,sigma=S";
        QTest::newRow("not a number") << "lognormal:median=abc" << "median='abc' is not a number";
        QTest::newRow("no value") << "lognormal:median" << "'median' is not key=value";
        QTest::newRow("negative sigma") << "lognormal:sigma=-1" << "sigma must be in (0, 10]";
        QTest::newRow("unknown key") << "lognormal:mu=7.56" << "unknown parameter 'mu'";
        QTest::newRow("zero context") << "long-tail:context=0" << "context must be a whole number";
        QTest::newRow("fractional context") << "long-tail:context=1.5"
                                            << "context must be a whole number";
        QTest::newRow("tail above 1") << "long-tail:tail=2" << "tail is the fraction";
        QTest::newRow("file without path") << "file:" << "file needs a path";
        // clang-format on
    }
    void badSpecNamesTheProblem() {
        QFETCH(QString, spec);
        QFETCH(QString, message);
        const auto parsed = parse_length_spec(spec.toStdString());
        QVERIFY(!parsed.ok());
        QCOMPARE(parsed.error().code, ErrorCode::invalid_input);
        QVERIFY2(QString::fromStdString(parsed.error().message).contains(message),
                 parsed.error().message.c_str());
    }

    void lengthFileSkipsCommentsAndBlankLines() {
        const auto lengths = read_length_file(kData + "lengths.txt");
        QVERIFY2(lengths.ok(), lengths.ok() ? "" : lengths.error().message.c_str());
        QCOMPARE(*lengths, (std::vector<std::int64_t>{1834, 612, 40211, 2950, 7}));
    }

    // A file replays in order, wraps around, and is clamped like the samplers.
    void fileSpecReplaysInArrivalOrder() {
        const auto lengths = sample("file:" + kData + "lengths.txt", 7, 99, 32768);
        QCOMPARE(lengths, (std::vector<std::int64_t>{1834, 612, 32768, 2950, 7, 1834, 612}));
    }

    void badLengthFileNamesFileAndLine_data() {
        QTest::addColumn<QString>("content");
        QTest::addColumn<QString>("message");
        // clang-format off
        QTest::newRow("letters") << "100\n200\nabc\n" << ":3: 'abc' is not a document length";
        QTest::newRow("zero") << "# header\n0\n" << ":2: '0' is not a document length";
        QTest::newRow("negative") << "5\n-3\n" << ":2: '-3' is not a document length";
        QTest::newRow("two numbers") << "5 6\n" << ":1: '5 6' is not a document length";
        QTest::newRow("fraction") << "12.5\n" << ":1: '12.5' is not a document length";
        QTest::newRow("only comments") << "# nothing\n\n" << "holds no lengths";
        // clang-format on
    }
    void badLengthFileNamesFileAndLine() {
        QFETCH(QString, content);
        QFETCH(QString, message);
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string path = dir.filePath("lengths.txt").toStdString();
        std::ofstream(path) << content.toStdString();
        const auto lengths = read_length_file(path);
        QVERIFY(!lengths.ok());
        QCOMPARE(lengths.error().code, ErrorCode::invalid_input);
        const auto text = QString::fromStdString(lengths.error().message);
        QVERIFY2(text.contains(QString::fromStdString(path)), qPrintable(text));
        QVERIFY2(text.contains(message), qPrintable(text));
    }

    void badLineInFixtureIsReported() {
        const auto lengths = read_length_file(kData + "lengths_bad_line.txt");
        QVERIFY(!lengths.ok());
        QVERIFY2(QString::fromStdString(lengths.error().message)
                     .contains("lengths_bad_line.txt:4: '12x'"),
                 lengths.error().message.c_str());
    }

    void missingFileIsAnIoError() {
        auto distribution = parse_length_spec("file:" + kData + "no_such_file.txt");
        QVERIFY(distribution.ok());
        const auto lengths = sample_lengths(*distribution, 10, 1, 100);
        QVERIFY(!lengths.ok());
        QCOMPARE(lengths.error().code, ErrorCode::io);
        QVERIFY(QString::fromStdString(lengths.error().message).contains("no_such_file.txt"));
    }
};

QTEST_GUILESS_MAIN(TestBalanceLengths)
#include "test_balance_lengths.moc"
