// A short text that millions of rows repeat, such as a workload row's balancer: the process
// keeps one copy of each distinct text and a row holds a pointer to it, 8 bytes where a
// std::string takes 32. The workload table of a 1 B-event run has ~9 M rows
// (docs/decisions.md, "What is kept per pass and per document is kept compact").
#pragma once

#include <compare>
#include <string>
#include <string_view>

namespace fulcrum {

class InternedText {
public:
    InternedText();  // ""
    InternedText(std::string_view text);
    InternedText(const std::string& text) : InternedText(std::string_view(text)) {}
    InternedText(const char* text) : InternedText(std::string_view(text)) {}

    const std::string& str() const { return *text_; }
    operator const std::string&() const { return *text_; }
    bool empty() const { return text_->empty(); }

    // One copy per text: equal texts are the same pointer.
    friend bool operator==(const InternedText& a, const InternedText& b) {
        return a.text_ == b.text_;
    }
    friend std::strong_ordering operator<=>(const InternedText& a, const InternedText& b) {
        return a.str() <=> b.str();
    }

private:
    const std::string* text_;
};

}  // namespace fulcrum
