#include "core/util/interned_text.h"

#include <mutex>
#include <unordered_set>

namespace fulcrum {

namespace {

// Node-based: a text's address stays put as others are added. Never shrinks; it holds the
// distinct texts only (a handful of balancer names).
struct Texts {
    std::mutex mutex;
    std::unordered_set<std::string> set{std::string()};
    const std::string* empty = &*set.begin();  // set before any thread can add to it
};

Texts& texts() {
    static Texts* all = new Texts;  // never destroyed: rows may outlive static destructors
    return *all;
}

}  // namespace

// No lock: every default-constructed row (the reader makes one per workload row) names "".
InternedText::InternedText() : text_(texts().empty) {}

InternedText::InternedText(std::string_view text) {
    Texts& all = texts();
    std::lock_guard lock(all.mutex);
    text_ = &*all.set.emplace(text).first;
}

}  // namespace fulcrum
