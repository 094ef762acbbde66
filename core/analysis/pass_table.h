// The run's passes as the analyses across ranks read them (run_analysis.cpp), held in memory or
// in a temporary file (issue 37, docs/analyses.md, "Runs larger than memory").
//
// Everything else the analyses keep while they read a run grows with its ranks; the passes grow
// with its steps too: 80 bytes each, 384 MB for the billion events of 1024 ranks over 137 steps.
// An owning table takes them a rank at a time, each rank's in (step, start) order (find_rank_
// passes), and past its memory budget moves them to a temporary file, unlinked as soon as it is
// made, in TMPDIR or the system's temporary folder. Its readers take them back a bounded run at
// a time in the order they came: whole, a rank at a time, or a window of steps across the
// ranks. The analyses read the same passes in the same order either way, so their answers are
// the same, bit for bit.
//
// A table made from a vector only views it (implicitly: the analyses' callers that hold their
// passes pass the vector): it hands its passes as one run and as one window, as the analyses
// took them before the table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/analysis/passes.h"
#include "core/analysis/scratch_table.h"
#include "core/util/result.h"

namespace fulcrum::analysis {

class PassTable {
public:
    // What an owning table holds in memory before it spills: a run of a few dozen steps on a
    // thousand ranks stays there.
    static constexpr std::int64_t kDefaultMemoryBytes = ScratchTable<Pass>::kDefaultMemoryBytes;

    PassTable() : PassTable(kDefaultMemoryBytes) {}  // owning, empty
    // Owning, empty: its passes in memory up to `memory_bytes`, and no more than that read back
    // at once, but for one step's; 0 spills from the first pass and reads a step at a time.
    explicit PassTable(std::int64_t memory_bytes) : rows_(memory_bytes, "passes") {}
    PassTable(const std::vector<Pass>& passes);  // NOLINT(google-explicit-constructor): a view

    // One rank's passes, after those of the ranks before (owning tables only). The error says
    // where the file could not be made or written, and what to do.
    Status append(std::span<const Pass> rank);

    std::size_t size() const { return rows_.size(); }
    bool empty() const { return rows_.empty(); }
    bool spilled() const { return rows_.spilled(); }
    // Ranks in ascending order, each rank's passes by step: what lets an analysis fold a
    // (rank, step) at a time.
    bool sorted_by_rank_and_step() const { return sorted_; }

    // Every pass in table order, handed a bounded run at a time.
    void for_each(const std::function<void(std::span<const Pass>)>& visit) const {
        rows_.for_each(visit);
    }
    // Each appended rank's passes whole, in table order (a view: all of its passes at once).
    void for_each_rank(const std::function<void(std::span<const Pass>)>& visit) const;
    // The passes of steps ≥ 0, a window of consecutive steps at a time in ascending order, each
    // step whole and in table order within the window; a window holds no more than the memory
    // budget unless one step alone has more. A table in memory (a view, or one that has not
    // spilled) hands all of its passes, any step, as one window.
    void for_each_step_window(const std::function<void(const std::vector<Pass>&)>& visit) const;
    // Every pass in table order, gathered into one vector.
    std::vector<Pass> all() const { return rows_.all(); }

    // What a read of the file met, if anything: the visits above stop handing passes at the
    // first failed read, and the caller asks once it is done.
    Status read_status() const { return rows_.read_status(); }

private:
    // A run of one step's passes in the table, [begin, end).
    struct StepRun {
        std::int32_t step = 0;
        std::size_t begin = 0, end = 0;
    };

    ScratchTable<Pass> rows_;
    bool sorted_ = true;
    Pass last_;                             // the last appended, for `sorted_`
    std::vector<std::size_t> rank_begins_;  // where each appended rank's passes begin
    std::vector<StepRun> step_runs_;        // by table order
};

}  // namespace fulcrum::analysis
