#include "core/report/run_throughput.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <utility>

#include "core/report/report_html.h"
#include "core/util/text_table.h"

namespace fulcrum::report {
namespace {

std::string epochs_text(int epochs) {
    return std::to_string(epochs) + (epochs == 1 ? " epoch" : " epochs");
}

// FNV-1a over 64-bit words.
void mix(std::uint64_t& hash, std::uint64_t word) {
    for (int byte = 0; byte < 8; ++byte) {
        hash ^= (word >> (8 * byte)) & 0xff;
        hash *= 1099511628211ull;
    }
}

}  // namespace

double RunThroughput::tokens_per_s() const {
    return step_time_ns > 0
               ? static_cast<double>(tokens) / (static_cast<double>(step_time_ns) * 1e-9)
               : 0.0;
}

TrainedTokens::TrainedTokens(std::vector<RankInfo> ranks) {
    std::sort(ranks.begin(), ranks.end(),
              [](const RankInfo& a, const RankInfo& b) { return a.rank < b.rank; });
    std::set<std::pair<std::int32_t, std::int32_t>> groups;
    for (const RankInfo& info : ranks) {
        if (info.pp <= 0 && info.tp <= 0 && groups.insert({info.dp, info.cp}).second) {
            counted_.insert(info.rank);
        }
    }
}

void TrainedTokens::add(const WorkloadEntry& row) {
    if (!counted_.contains(row.rank)) {
        return;
    }
    const std::int64_t tokens = std::max(0, row.token_end - row.token_begin);
    tokens_ += tokens;
    tokens_of_[row.doc_id] += tokens;
}

void TrainedTokens::fill(RunThroughput& out) const {
    out.tokens = tokens_;
    out.documents = static_cast<std::int64_t>(tokens_of_.size());
    std::uint64_t hash = 14695981039346656037ull;
    for (const auto& [document, tokens] : tokens_of_) {
        mix(hash, static_cast<std::uint64_t>(document));
        mix(hash, static_cast<std::uint64_t>(tokens));
    }
    out.documents_fingerprint = hash;
}

RunThroughput run_throughput(const analysis::RunTrace& trace, const analysis::RunAnalysis& analysis,
                             const TrainedTokens* tokens) {
    RunThroughput out;
    out.epochs = analysis.config.epochs;
    if (tokens != nullptr) {
        tokens->fill(out);
    } else {
        std::vector<RankInfo> ranks;
        for (const analysis::RankTrace& rank : trace.ranks) {
            ranks.push_back(rank.info);
        }
        TrainedTokens tally(std::move(ranks));
        for (const WorkloadEntry& entry : trace.workload) {
            tally.add(entry);
        }
        tally.fill(out);
    }

    std::map<std::int32_t, std::pair<std::int64_t, std::int64_t>> spans;  // step: start, end
    for (const analysis::StepBreakdown& row : analysis.breakdown) {
        if (row.whole_trace || !row.step) {
            continue;
        }
        auto [it, added] = spans.try_emplace(*row.step, row.start_ns, row.end_ns);
        if (!added) {
            it->second.first = std::min(it->second.first, row.start_ns);
            it->second.second = std::max(it->second.second, row.end_ns);
        }
    }
    out.steps = static_cast<int>(spans.size());
    for (const auto& [step, span] : spans) {
        out.step_time_ns += span.second - span.first;
    }
    return out;
}

bool same_documents(const RunThroughput& a, const RunThroughput& b) {
    return a.tokens > 0 && a.tokens == b.tokens && a.documents == b.documents &&
           a.documents_fingerprint == b.documents_fingerprint;
}

std::optional<double> tokens_per_s_vs(const RunThroughput& run, const RunThroughput& first) {
    if (!same_documents(run, first) || !run.has_tokens() || !first.has_tokens()) {
        return std::nullopt;
    }
    return run.tokens_per_s() / first.tokens_per_s();
}

std::string comparison_basis(const std::vector<RunThroughput>& runs) {
    if (runs.empty()) {
        return {};
    }
    const RunThroughput& first = runs.front();
    if (!first.has_tokens()) {
        return "The first run has no workload table or no steps, so tokens/s is not compared.";
    }
    const auto same = static_cast<std::size_t>(
        std::count_if(runs.begin(), runs.end(),
                      [&](const RunThroughput& run) { return same_documents(run, first); }));
    std::string documents = "the same " + std::to_string(first.documents) + " documents";
    if (first.epochs > 0) {
        documents += " (" + epochs_text(first.epochs) + ")";
    }
    if (same == runs.size()) {
        return "Every run trained " + documents +
               ", each as often: tokens/s against the first run is the speedup.";
    }
    if (same > 1) {
        return std::to_string(same) + " of the " + std::to_string(runs.size()) +
               " runs, the first included, trained " + documents +
               ": their tokens/s against the first is the speedup; the others trained "
               "different documents, so theirs is not compared.";
    }
    return "The runs trained different documents (train or simulate whole epochs with --epochs "
           "to compare on the same ones), so tokens/s is not compared against the first run.";
}

std::string throughput_section_html(const std::vector<std::string>& labels,
                                    const std::vector<std::string>& balancers,
                                    const std::vector<RunThroughput>& runs) {
    std::string out = "<section id=\"throughput\"><h2>Throughput</h2>\n";
    out +=
        "<p class=\"caption\">Tokens: every token the run trained (its workload table). "
        "Step time: Σ over steps of the earliest rank's start to the latest rank's end. " +
        html_escape(comparison_basis(runs)) + "</p>";
    out += "<table class=\"sortable\" data-table=\"throughput\"><thead><tr>";
    for (const char* header : {"run", "balancer", "steps", "documents", "tokens", "step time",
                               "tokens/s", "tokens/s vs first"}) {
        out += std::string("<th>") + header + "</th>";
    }
    out += "</tr></thead><tbody>\n";
    for (std::size_t i = 0; i < runs.size(); ++i) {
        const RunThroughput& run = runs[i];
        const auto ratio = tokens_per_s_vs(run, runs.front());
        const auto cell = [](const std::string& sort, const std::string& text) {
            return "<td data-v=\"" + sort + "\">" + text + "</td>";
        };
        out += "<tr><td>" + html_escape(i < labels.size() ? labels[i] : "") + "</td><td>" +
               html_escape(i < balancers.size() ? balancers[i] : "") + "</td>";
        out += cell(std::to_string(run.steps), std::to_string(run.steps));
        out += cell(std::to_string(run.documents), std::to_string(run.documents));
        out += cell(std::to_string(run.tokens), std::to_string(run.tokens));
        out += cell(std::to_string(run.step_time_ns),
                    format_fixed(static_cast<double>(run.step_time_ns) * 1e-6, 1) + " ms");
        out += run.has_tokens()
                   ? cell(format_fixed(run.tokens_per_s(), 1), format_fixed(run.tokens_per_s(), 0))
                   : std::string("<td>—</td>");
        out += ratio ? cell(format_fixed(*ratio, 4), format_fixed(*ratio, 2) + "×")
                     : std::string("<td>—</td>");
        out += "</tr>\n";
    }
    out += "</tbody></table></section>\n";
    return out;
}

}  // namespace fulcrum::report
