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
};

Texts& texts() {
    static Texts* all = new Texts;  // never destroyed: rows may outlive static destructors
    return *all;
}

}  // namespace

InternedText::InternedText() : InternedText(std::string_view()) {}

InternedText::InternedText(std::string_view text) {
    Texts& all = texts();
    std::lock_guard lock(all.mutex);
    text_ = &*all.set.emplace(text).first;
}

}  // namespace fulcrum
