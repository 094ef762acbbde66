// Loading text corpora and packing them into micro-batches.
#include <QTest>

#include <QTemporaryDir>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "engine/data/corpus.h"
#include "engine/data/packer.h"
#include "engine/model/lm_head.h"

using namespace fulcrum;
using namespace fulcrum::engine;

Q_DECLARE_METATYPE(std::vector<std::string>)

namespace {

// Installed by Debian's base-files package (Essential: yes), so present on every system.
const char* const kLicences = "/usr/share/common-licenses";

void write_file(const QTemporaryDir& dir, const char* name, const std::string& bytes) {
    std::ofstream out(std::filesystem::path(dir.path().toStdString()) / name, std::ios::binary);
    out << bytes;
}

}  // namespace

class EngineDataTest : public QObject {
    Q_OBJECT

private slots:
    void commonLicenses_data();
    void commonLicenses();
    void splitBlankLines_data();
    void splitBlankLines();
    void missingDirectoryIsAnIoError();
    void directoryWithoutTextIsInvalid();
    void binaryFilesAndBrokenLinksAreSkipped();
    void samplerIsDeterministic();
    void packingLaysDocumentsEndToEnd();
    void packedBatchesFitTheModel();
};

void EngineDataTest::commonLicenses_data() {
    QTest::addColumn<int>("split");
    QTest::newRow("one document per file") << int(DocumentSplit::file);
    QTest::newRow("one document per paragraph") << int(DocumentSplit::blank_line);
}

void EngineDataTest::commonLicenses() {
    QFETCH(int, split);
    auto corpus = load_text_corpus(kLicences, DocumentSplit(split));
    QVERIFY2(corpus.ok(), corpus.ok() ? "" : corpus.error().message.c_str());
    std::set<std::string> texts;
    std::set<std::string> files;
    for (const CorpusDocument& d : corpus->documents) {
        QVERIFY(!d.text.empty());
        texts.insert(d.text);
        files.insert(d.source.substr(0, d.source.find('#')));
    }
    // GPL is a link to GPL-3 (and LGPL, GFDL likewise): each text is read once.
    QVERIFY(files.count("GPL-3") == 1);
    QVERIFY(files.count("GPL") == 0);
    QVERIFY(corpus->skipped_binary.empty());
    if (DocumentSplit(split) == DocumentSplit::file) {
        QCOMPARE(texts.size(), corpus->documents.size());
        QVERIFY(corpus->total_bytes() > 100'000);
        // Sorted by path: the same order on every machine.
        for (std::size_t i = 1; i < corpus->documents.size(); ++i) {
            QVERIFY(corpus->documents[i - 1].source < corpus->documents[i].source);
        }
    } else {
        QVERIFY(corpus->documents.size() > 10 * files.size());
        for (const CorpusDocument& d : corpus->documents) {
            QVERIFY(d.text.find("\n\n") == std::string::npos);
        }
    }
}

void EngineDataTest::splitBlankLines_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<std::vector<std::string>>("blocks");
    QTest::newRow("two paragraphs") << "a\nb\n\nc\n" << std::vector<std::string>{"a\nb\n", "c\n"};
    QTest::newRow("blank lines at both ends") << "\n\na\n\n\n" << std::vector<std::string>{"a\n"};
    QTest::newRow("whitespace-only separator")
        << "a\n \t\nb" << std::vector<std::string>{"a\n", "b"};
    QTest::newRow("CRLF") << "a\r\n\r\nb\r\n" << std::vector<std::string>{"a\r\n", "b\r\n"};
    QTest::newRow("nothing but blanks") << "\n  \n" << std::vector<std::string>{};
}

void EngineDataTest::splitBlankLines() {
    QFETCH(QString, text);
    QFETCH(std::vector<std::string>, blocks);
    QCOMPARE(split_blank_lines(text.toStdString()), blocks);
}

void EngineDataTest::missingDirectoryIsAnIoError() {
    auto corpus = load_text_corpus("/nonexistent/fulcrum-corpus", DocumentSplit::file);
    QVERIFY(!corpus.ok());
    QCOMPARE(corpus.error().code, ErrorCode::io);
    QVERIFY(corpus.error().message.find("/nonexistent/fulcrum-corpus") != std::string::npos);
}

void EngineDataTest::directoryWithoutTextIsInvalid() {
    QTemporaryDir dir;
    auto corpus = load_text_corpus(dir.path().toStdString(), DocumentSplit::file);
    QVERIFY(!corpus.ok());
    QCOMPARE(corpus.error().code, ErrorCode::invalid_input);
}

void EngineDataTest::binaryFilesAndBrokenLinksAreSkipped() {
    QTemporaryDir dir;
    write_file(dir, "notes.txt", "plain text\n");
    write_file(dir, "image.bin", std::string("\x89PNG\0\0\0", 7));
    std::filesystem::create_symlink("/nonexistent/target",
                                    std::filesystem::path(dir.path().toStdString()) / "dangling");
    auto corpus = load_text_corpus(dir.path().toStdString(), DocumentSplit::file);
    QVERIFY(corpus.ok());
    QCOMPARE(corpus->documents.size(), std::size_t(1));
    QCOMPARE(corpus->documents[0].source, std::string("notes.txt"));
    QCOMPARE(corpus->skipped_binary, std::vector<std::string>{"image.bin"});
}

void EngineDataTest::samplerIsDeterministic() {
    auto corpus = load_text_corpus(kLicences, DocumentSplit::blank_line);
    QVERIFY(corpus.ok());
    auto batches = [&](std::uint64_t seed) {
        MicroBatchSampler sampler(*corpus, PackingConfig{64, 2, seed});
        std::vector<std::vector<std::int32_t>> out;
        for (int i = 0; i < 5; ++i)
            out.push_back(sampler.next().tokens);
        return out;
    };
    QVERIFY(batches(11) == batches(11));
    QVERIFY(batches(11) != batches(12));
}

// Documents of one letter each, so every packed piece shows where it came from.
void EngineDataTest::packingLaysDocumentsEndToEnd() {
    QTemporaryDir dir;
    const std::map<char, int> sizes = {{'a', 5}, {'b', 9}, {'c', 12}, {'d', 2}};  // 28 bytes
    for (auto [letter, size] : sizes) {
        write_file(dir, std::string(1, letter).c_str(), std::string(std::size_t(size), letter));
    }
    auto corpus = load_text_corpus(dir.path().toStdString(), DocumentSplit::file);
    QVERIFY(corpus.ok());
    const int context = 7;
    MicroBatchSampler sampler(*corpus, PackingConfig{context, 2, 3});
    std::map<char, int> seen;
    for (int b = 0; b < 2; ++b) {  // 2 micro-batches × 2 sequences × 7 tokens = one epoch
        const TokenBatch batch = sampler.next();
        QCOMPARE(batch.size(), std::int64_t(2 * context));
        std::int64_t start = 0;
        for (std::int32_t length : batch.doc_lengths) {
            // No piece straddles a sequence boundary.
            QCOMPARE((start + length - 1) / context, start / context);
            const char letter = char(batch.tokens[std::size_t(start)]);
            for (std::int32_t i = 0; i < length; ++i) {
                QCOMPARE(char(batch.tokens[std::size_t(start + i)]), letter);
                const std::int32_t expected =
                    i + 1 < length ? batch.tokens[std::size_t(start + i + 1)] : kernels::kNoTarget;
                QCOMPARE(batch.targets[std::size_t(start + i)], expected);
            }
            seen[letter] += length;
            start += length;
        }
    }
    QCOMPARE(seen, sizes);  // every byte exactly once per epoch
    QCOMPARE(sampler.epoch(), std::int64_t(1));
}

void EngineDataTest::packedBatchesFitTheModel() {
    auto corpus = load_text_corpus(kLicences, DocumentSplit::file);
    QVERIFY(corpus.ok());
    ModelShape config;
    config.context = 128;
    MicroBatchSampler sampler(*corpus, PackingConfig{128, 4, 1});
    for (int i = 0; i < 20; ++i) {
        const TokenBatch batch = sampler.next();
        const Status valid = validate(batch, config);
        QVERIFY2(valid.ok(), valid.ok() ? "" : valid.error().message.c_str());
        QCOMPARE(batch.size(), std::int64_t(4 * 128));
    }
}

QTEST_GUILESS_MAIN(EngineDataTest)
#include "test_engine_data.moc"
