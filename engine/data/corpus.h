// Documents from real text files, bytes as tokens.
//
// A corpus is a directory; every regular file under it is text (recursively; links to files
// are followed and each file is read once, under its own name rather than a link's; links to
// directories are not followed, and broken links are ignored). A file becomes one document,
// or one document per block of non-blank lines (paragraphs), as the caller chooses. Files
// whose first 4 KiB contain a NUL byte are skipped as binary and listed. Documents come out
// in the byte order of their relative paths, so a corpus loads identically on every machine
// and every rank.
//
// The engine's own tests use /usr/share/common-licenses: the licence texts that Debian's
// base-files package (Essential: yes) installs on every Debian system — 14 distinct files,
// 237 KB of English once the GPL/LGPL/GFDL links are read as their targets.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/util/result.h"

namespace fulcrum::engine {

enum class DocumentSplit : std::uint8_t {
    file,        // one document per file
    blank_line,  // one document per block of lines separated by blank (whitespace-only) lines
};

struct CorpusDocument {
    std::string source;  // relative path, plus "#<block>" (1-based) when split by blank lines
    std::string text;
};

struct Corpus {
    std::vector<CorpusDocument> documents;
    std::vector<std::string> skipped_binary;  // relative paths

    std::int64_t total_bytes() const;
};

// io when the directory cannot be read; invalid_input when it holds no text at all.
Result<Corpus> load_text_corpus(const std::filesystem::path& directory, DocumentSplit split);

// The blocks of `text` separated by blank lines; each keeps its lines' newlines.
std::vector<std::string> split_blank_lines(const std::string& text);

}  // namespace fulcrum::engine
