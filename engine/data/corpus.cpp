#include "engine/data/corpus.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <system_error>

namespace fulcrum::engine {

namespace fs = std::filesystem;

std::int64_t Corpus::total_bytes() const {
    std::int64_t n = 0;
    for (const CorpusDocument& d : documents)
        n += std::int64_t(d.text.size());
    return n;
}

std::vector<std::string> split_blank_lines(const std::string& text) {
    std::vector<std::string> blocks;
    std::string block;
    std::size_t start = 0;
    while (start < text.size()) {
        std::size_t end = text.find('\n', start);
        end = end == std::string::npos ? text.size() : end + 1;
        const std::string_view line(text.data() + start, end - start);
        const bool blank = line.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos;
        if (blank) {
            if (!block.empty())
                blocks.push_back(std::move(block));
            block.clear();
        } else {
            block.append(line);
        }
        start = end;
    }
    if (!block.empty())
        blocks.push_back(std::move(block));
    return blocks;
}

Result<Corpus> load_text_corpus(const fs::path& directory, DocumentSplit split) {
    std::error_code ec;
    if (!fs::is_directory(directory, ec)) {
        return Error{ErrorCode::io, "corpus: " + directory.string() +
                                        " is not a readable directory; pass a folder of text "
                                        "files"};
    }
    // One entry per distinct file: several paths may lead to it through links (Debian's
    // GPL -> GPL-3). The path that is not a link wins, then the smallest relative path, so the
    // choice does not depend on the order the directory lists its entries in.
    struct Entry {
        std::string relative;
        fs::path path;
        bool link;
        bool preferred_to(const Entry& other) const {
            return link != other.link ? !link : relative < other.relative;
        }
    };
    std::map<fs::path, Entry> by_target;
    // Links to files are followed, links to directories are not (no cycles to guard).
    const auto options = fs::directory_options::skip_permission_denied;
    for (auto it = fs::recursive_directory_iterator(directory, options, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        // A broken link, a socket or an entry we may not stat is skipped, not fatal.
        std::error_code entry_ec;
        if (!it->is_regular_file(entry_ec) || entry_ec)
            continue;
        const fs::path target = fs::canonical(it->path(), entry_ec);
        if (entry_ec)
            continue;
        Entry entry{it->path().lexically_relative(directory).generic_string(), it->path(),
                    it->is_symlink(entry_ec)};
        auto [slot, inserted] = by_target.try_emplace(target, entry);
        if (!inserted && entry.preferred_to(slot->second))
            slot->second = std::move(entry);
    }
    if (ec) {
        return Error{ErrorCode::io,
                     "corpus: cannot list " + directory.string() + ": " + ec.message()};
    }
    std::vector<std::pair<std::string, fs::path>> files;  // (relative, path), sorted
    for (auto& [target, entry] : by_target)
        files.emplace_back(entry.relative, entry.path);
    std::sort(files.begin(), files.end());

    Corpus corpus;
    for (const auto& [relative, path] : files) {
        std::ifstream in(path, std::ios::binary);
        if (!in) {
            return Error{ErrorCode::io, "corpus: cannot read " + path.string()};
        }
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (text.empty())
            continue;
        const std::size_t head = std::min<std::size_t>(text.size(), 4096);
        if (std::string_view(text.data(), head).find('\0') != std::string_view::npos) {
            corpus.skipped_binary.push_back(relative);
            continue;
        }
        if (split == DocumentSplit::file) {
            corpus.documents.push_back({relative, std::move(text)});
            continue;
        }
        std::vector<std::string> blocks = split_blank_lines(text);
        for (std::size_t b = 0; b < blocks.size(); ++b) {
            corpus.documents.push_back(
                {relative + "#" + std::to_string(b + 1), std::move(blocks[b])});
        }
    }
    if (corpus.documents.empty()) {
        return Error{ErrorCode::invalid_input,
                     "corpus: no text documents under " + directory.string()};
    }
    return corpus;
}

}  // namespace fulcrum::engine
