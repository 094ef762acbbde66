#include "core/analysis/pass_table.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace fulcrum::analysis {

PassTable::PassTable(const std::vector<Pass>& passes) : rows_(passes) {
    sorted_ = std::is_sorted(passes.begin(), passes.end(), [](const Pass& a, const Pass& b) {
        return std::tie(a.rank, a.step) < std::tie(b.rank, b.step);
    });
}

Status PassTable::append(std::span<const Pass> rank) {
    const std::size_t at = rows_.size();
    if (auto kept = rows_.append(rank); !kept) {
        return kept;
    }
    rank_begins_.push_back(at);
    for (std::size_t i = 0; i < rank.size(); ++i) {
        const Pass& pass = rank[i];
        if (step_runs_.empty() || step_runs_.back().end != at + i ||
            step_runs_.back().step != pass.step) {
            step_runs_.push_back({pass.step, at + i, at + i});
        }
        ++step_runs_.back().end;
        const Pass* before = i > 0 ? &rank[i - 1] : (at > 0 ? &last_ : nullptr);
        if (before != nullptr &&
            std::tie(pass.rank, pass.step) < std::tie(before->rank, before->step)) {
            sorted_ = false;
        }
    }
    if (!rank.empty()) {
        last_ = rank.back();
    }
    return {};
}

void PassTable::for_each_rank(const std::function<void(std::span<const Pass>)>& visit) const {
    std::vector<Pass> buffer;
    if (rank_begins_.empty()) {  // a view: its passes at once
        if (!rows_.empty()) {
            visit(rows_.run(0, rows_.size(), buffer));
        }
        return;
    }
    for (std::size_t r = 0; r < rank_begins_.size(); ++r) {
        const std::size_t begin = rank_begins_[r];
        const std::size_t end = r + 1 < rank_begins_.size() ? rank_begins_[r + 1] : rows_.size();
        if (begin == end) {
            continue;
        }
        const std::span<const Pass> passes = rows_.run(begin, end, buffer);
        if (passes.empty()) {
            return;  // a failed read: read_status says
        }
        visit(passes);
    }
}

void PassTable::for_each_step_window(
    const std::function<void(const std::vector<Pass>&)>& visit) const {
    if (const std::vector<Pass>* held = rows_.in_memory()) {
        // The passes whole, as the analyses took them before the table.
        if (!held->empty()) {
            visit(*held);
        }
        return;
    }
    std::vector<Pass> window;
    std::map<std::int32_t, std::size_t> step_sizes;
    for (const StepRun& run : step_runs_) {
        if (run.step >= 0) {
            step_sizes[run.step] += run.end - run.begin;
        }
    }
    const auto window_passes = static_cast<std::size_t>(rows_.memory_bytes()) / sizeof(Pass);
    for (auto first = step_sizes.begin(); first != step_sizes.end();) {
        std::size_t passes = 0;
        const auto last = batch_end(first, step_sizes.end(), window_passes, passes);
        const std::int32_t low = first->first;
        const std::int32_t high = std::prev(last)->first;
        window.clear();
        window.reserve(passes);
        // The window's runs in table order, those that follow on one another (a rank's steps)
        // read at once.
        std::size_t begin = 0, end = 0;
        const auto flush = [&] {
            const std::size_t before = window.size();
            if (end > begin) {
                rows_.read(begin, end, window);
            }
            return window.size() - before == end - begin;
        };
        for (const StepRun& run : step_runs_) {
            if (run.step < low || run.step > high) {
                continue;
            }
            if (run.begin != end) {
                if (!flush()) {
                    return;  // a failed read: read_status says
                }
                begin = run.begin;
            }
            end = run.end;
        }
        if (!flush()) {
            return;
        }
        visit(window);
        first = last;
    }
}

}  // namespace fulcrum::analysis
