#include "core/report/plan_section.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/report/report_html.h"
#include "core/util/text_table.h"

namespace fulcrum::report {
namespace {

using plan::Candidate;
using plan::CandidateStatus;

constexpr const char* kInfeasibleGrey = "#b5b5b5";

// Peak memory in the table: GiB with one decimal, three significant figures below 1 GiB.
std::string gib_text(double gib) {
    return gib >= 1 ? format_fixed(gib, 1) : format_fixed(gib, 3);
}

// The colour of a schedule, the same for every candidate under it (the legend's order).
std::size_t schedule_color(const plan::PlanRequest& request, parallel::PipelineSchedule s) {
    const auto& schedules = request.space.schedules;
    const auto found = std::find(schedules.begin(), schedules.end(), s);
    return static_cast<std::size_t>(found - schedules.begin()) % 8;
}

std::string point_tip(const Candidate& c, std::size_t rank) {
    std::string tip = "dp×tp×pp×cp " + layout_text(c) + ", m " +
                      std::to_string(c.layout.microbatches) + ", " + schedule_text(c) + ", " +
                      knobs_text(c) + ", " + balance::balancer_name(c.balancer) + "\n" +
                      plan::candidate_status_name(c.status);
    if (rank > 0) {
        tip += " #" + std::to_string(rank);
    }
    tip += ": " + gib_text(c.memory.total_gib) + " GiB peak";
    if (c.tokens_per_second > 0) {
        tip += ", " + format_fixed(c.tokens_per_second, 0) + " tokens/s, MFU " +
               format_percent(c.mfu, 1.0);
    }
    if (!c.reason.empty()) {
        tip += "\n" + c.reason;
    }
    return tip;
}

struct Axes {
    double width = 760, plot_width = 0, plot_height = 300, height = 0;
    double x_top = 1, y_top = 1;
    double x(double gib) const { return kMarginLeft + plot_width * gib / x_top; }
    double y(double tokens) const { return kMarginTop + plot_height * (1 - tokens / y_top); }
};

Axes plan_axes(const plan::PlanRequest& request, const plan::PlanResult& result) {
    Axes axes;
    axes.plot_width = axes.width - kMarginLeft - kMarginRight;
    axes.height = kMarginTop + axes.plot_height + kMarginBottom + 18;
    double x_max = request.gpu_memory_gib, y_max = 0;
    for (const Candidate& c : result.candidates) {
        if (c.memory.total_gib > 0) {
            x_max = std::max(x_max, std::min(c.memory.total_gib, 2 * request.gpu_memory_gib));
        }
        y_max = std::max(y_max, c.tokens_per_second);
    }
    axes.x_top = nice_ceiling(x_max);
    axes.y_top = nice_ceiling(y_max);
    return axes;
}

// Tokens/s on the axis: 750k, 1.2M.
std::string tokens_text(double tokens) {
    return tokens >= 1e6   ? format_fixed(tokens / 1e6, tokens >= 1e7 ? 0 : 1) + "M"
           : tokens >= 1e3 ? format_fixed(tokens / 1e3, 0) + "k"
                           : format_fixed(tokens, 0);
}

// One circle; infeasible candidates without a figure for tokens/s sit on the x axis, and those
// beyond twice the GPU's memory at the right edge (the tooltip has their figure).
void point(std::string& out, const Axes& axes, const Candidate& c, std::size_t rank,
           std::string_view fill, double radius, double opacity) {
    const double gib = std::min(c.memory.total_gib, axes.x_top);
    out += "<circle class=\"mark\" data-status=\"" +
           std::string(plan::candidate_status_name(c.status)) + "\"" +
           (rank > 0 ? " data-rank=\"" + std::to_string(rank) + "\"" : std::string()) + " cx=\"" +
           px(axes.x(gib)) + "\" cy=\"" + px(axes.y(std::max(c.tokens_per_second, 0.0))) +
           "\" r=\"" + px(radius) + "\" fill=\"" + std::string(fill) + "\" fill-opacity=\"" +
           format_fixed(opacity, 2) + "\" data-tip=\"" + html_escape(point_tip(c, rank)) + "\"/>";
}

void x_axis(std::string& out, const Axes& axes) {
    for (int i = 0; i <= 4; ++i) {
        const double gib = axes.x_top * i / 4.0;
        out += "<line class=\"grid\" x1=\"" + px(axes.x(gib)) + "\" x2=\"" + px(axes.x(gib)) +
               "\" y1=\"" + px(kMarginTop) + "\" y2=\"" + px(kMarginTop + axes.plot_height) +
               "\"/>";
        svg_text(out, axes.x(gib), kMarginTop + axes.plot_height + 14, format_fixed(gib, 0));
    }
    svg_text(out, kMarginLeft + axes.plot_width / 2, kMarginTop + axes.plot_height + 30,
             "peak memory of the fullest rank (GiB)");
}

void plan_chart(const plan::PlanRequest& request, const plan::PlanResult& result,
                std::string& out) {
    const Axes axes = plan_axes(request, result);
    open_chart(out, "plan", 0, axes.width, axes.height, "Predicted tokens/s against peak memory");
    y_axis(out, axes.width, axes.plot_height, axes.y_top, tokens_text);
    x_axis(out, axes);
    const double middle = kMarginTop + axes.plot_height / 2;
    svg_text(out, 16, middle, "predicted tokens/s", "middle",
             " transform=\"rotate(-90 16 " + px(middle) + ")\"");
    // Infeasible first, then estimated, then ranked, so the answer is drawn on top.
    std::size_t drawable = 0;
    for (const Candidate& c : result.candidates) {
        drawable += c.memory.total_gib > 0 && c.status != CandidateStatus::ranked;
    }
    const std::size_t stride =
        drawable > kMaxPlanPoints ? (drawable + kMaxPlanPoints - 1) / kMaxPlanPoints : 1;
    std::size_t seen = 0;
    for (const CandidateStatus status :
         {CandidateStatus::infeasible, CandidateStatus::dominated, CandidateStatus::estimated}) {
        for (const Candidate& c : result.candidates) {
            if (c.status != status || !(c.memory.total_gib > 0) || seen++ % stride != 0) {
                continue;
            }
            const bool fits = status != CandidateStatus::infeasible;
            point(
                out, axes, c, 0,
                fits ? kSeriesColors[schedule_color(request, c.layout.schedule)] : kInfeasibleGrey,
                2.5, fits ? 0.35 : 0.6);
        }
    }
    for (std::size_t i = result.ranked.size(); i-- > 0;) {
        const Candidate& c = result.candidates[result.ranked[i]];
        const bool top = i < static_cast<std::size_t>(request.top_k);
        point(out, axes, c, i + 1, kSeriesColors[schedule_color(request, c.layout.schedule)],
              top ? 5 : 3.5, top ? 1.0 : 0.7);
    }
    const double budget = request.gpu_memory_gib * request.usable_memory_fraction;
    out += "<line class=\"budget\" stroke=\"#e15759\" stroke-dasharray=\"4 3\" x1=\"" +
           px(axes.x(budget)) + "\" x2=\"" + px(axes.x(budget)) + "\" y1=\"" + px(kMarginTop) +
           "\" y2=\"" + px(kMarginTop + axes.plot_height) + "\"/>";
    svg_text(out, axes.x(budget) + 4, kMarginTop + 10, "budget " + format_fixed(budget, 0) + " GiB",
             "start");
    std::vector<std::string> names;
    for (const parallel::PipelineSchedule s : request.space.schedules) {
        names.push_back(parallel::schedule_name(s));
    }
    legend(out, kMarginLeft, axes.height - 4, names);
    close_chart(out);
    if (stride > 1) {
        out += "<p class=\"caption\">" + number(static_cast<std::int64_t>(drawable)) +
               " candidates that are not ranked: every " +
               number(static_cast<std::int64_t>(stride)) + "th is drawn.</p>\n";
    }
}

void top_table(const plan::PlanRequest& request, const plan::PlanResult& result, std::string& out) {
    Table table("plan_top",
                {"rank", "dp×tp×pp×cp", "m", "schedule", "recompute / SP", "balancer", "sharding",
                 "step", "tokens/s", "MFU", "peak GiB", "bubble", "imbalance"});
    const std::size_t shown =
        std::min(result.ranked.size(), static_cast<std::size_t>(std::max(request.top_k, 0)));
    for (std::size_t i = 0; i < shown; ++i) {
        const Candidate& c = result.candidates[result.ranked[i]];
        table.add({int_cell(static_cast<std::int64_t>(i + 1)), text_cell(layout_text(c)),
                   int_cell(c.layout.microbatches), text_cell(schedule_text(c)),
                   text_cell(knobs_text(c)), text_cell(balance::balancer_name(c.balancer)),
                   text_cell(c.layout.grid.cp > 1 ? balance::cp_sharding_name(c.sharding) : "-"),
                   duration_cell(c.step_ns), fixed_cell(c.tokens_per_second, 0),
                   percent_cell(c.mfu, 1.0),
                   Cell{gib_text(c.memory.total_gib), format_fixed(c.memory.total_gib, 6)},
                   percent_cell(c.bubble_fraction, 1.0), fixed_cell(c.imbalance, 2)});
    }
    if (table.empty()) {
        out += "<p class=\"empty\">No layout fits in " + format_fixed(request.gpu_memory_gib, 0) +
               " GiB per GPU: see the reasons below.</p>\n";
        return;
    }
    table.render(out);
}

void infeasible_table(const plan::PlanResult& result, std::string& out) {
    if (result.counts.infeasible_by_reason.empty()) {
        return;
    }
    out += "<h3>Not feasible, by reason</h3>\n";
    Table table("plan_infeasible", {"reason", "candidates", "for example"});
    for (const auto& [kind, n] : result.counts.infeasible_by_reason) {
        // An init capture: Clang 14 (the sanitizer build) cannot capture a structured binding.
        const auto example = std::find_if(
            result.candidates.begin(), result.candidates.end(), [&kind = kind](const auto& c) {
                return c.status == CandidateStatus::infeasible && c.reason_kind == kind;
            });
        table.add({text_cell(kind), int_cell(n),
                   text_cell(example == result.candidates.end()
                                 ? std::string()
                                 : layout_text(*example) + ": " + example->reason)});
    }
    table.render(out);
}

}  // namespace

std::string schedule_text(const Candidate& c) {
    std::string text = parallel::schedule_name(c.layout.schedule);
    if (c.layout.virtual_stages > 1) {
        text += " x" + std::to_string(c.layout.virtual_stages);
    }
    return text;
}

std::string knobs_text(const Candidate& c) {
    std::string text = parallel::recompute_name(c.layout.recompute);
    if (c.layout.sequence_parallel) {
        text += ", sp";
    }
    if (c.layout.offload_checkpoints) {
        text += ", checkpoints offloaded";
    }
    if (c.offload) {
        text += ", offload (chunks of " + std::to_string(c.attention_chunk) + ")";
    }
    if (c.layout.context_parallelism == parallel::ContextParallelism::ulysses) {
        text += ", ulysses";
    }
    if (c.layout.zero_stage >= 2) {
        text += ", zero " + std::to_string(c.layout.zero_stage);
    }
    if (c.layout.rank_order != parallel::kMegatronOrder) {
        text += ", ranks " + parallel::rank_order_name(c.layout.rank_order);
    }
    return text;
}

std::string layout_text(const Candidate& c) {
    return std::to_string(c.layout.grid.dp) + "×" + std::to_string(c.layout.grid.tp) + "×" +
           std::to_string(c.layout.grid.pp) + "×" + std::to_string(c.layout.grid.cp);
}

void plan_section(const plan::PlanRequest& request, const plan::PlanResult& result,
                  std::string& out) {
    const plan::PlanCounts& counts = result.counts;
    out += "<section id=\"plan\"><h2>Plan</h2>\n<p class=\"caption\">" + number(counts.enumerated) +
           " candidates in " + format_fixed(result.elapsed_s, 1) + " s (" +
           html_escape(result.cost_source) + "): " + number(counts.infeasible) + " do not fit, " +
           number(counts.dominated) + " fit with less recomputation, " +
           number(counts.estimated + counts.simulated) + " estimated, " + number(counts.simulated) +
           " simulated. Each point is a candidate: coloured by schedule, the top " +
           number(request.top_k) +
           " large, estimated ones light, those that do not fit grey at their memory (on the "
           "x axis when they have no estimate). The dashed line is the memory budget (" +
           format_percent(request.usable_memory_fraction, 1.0) + " of " +
           format_fixed(request.gpu_memory_gib, 0) + " GiB; docs/plan.md).</p>\n";
    plan_chart(request, result, out);
    out += "<h3>Top " + number(request.top_k) + "</h3>\n";
    top_table(request, result, out);
    infeasible_table(result, out);
    for (const std::string& note : result.notes) {
        out += "<p class=\"caption\">" + html_escape(note) + "</p>\n";
    }
    out += "</section>\n";
}

std::string plan_report(const plan::PlanRequest& request, const plan::PlanResult& result) {
    std::string out;
    std::string worlds;
    for (const int world : request.world_sizes) {
        worlds += (worlds.empty() ? "" : ", ") + std::to_string(world);
    }
    open_document(out, "Fulcrum plan: " + worlds + " GPUs",
                  "Made by fulcrum plan. Hover a point for its layout and why it does or does "
                  "not fit; wheel to zoom, drag to pan, double-click to reset; click a table "
                  "header to sort. The search: docs/plan.md.");
    out += "</header>\n";
    plan_section(request, result, out);
    close_document(out);
    return out;
}

}  // namespace fulcrum::report
