#include "core/report/hot_switch_section.h"

#include <cmath>

#include "core/report/report_html.h"
#include "core/util/text_table.h"

namespace fulcrum::report {

namespace {

std::string bytes_text(double bytes) {
    return format_bytes(std::llround(bytes));
}

void breakdown(const analysis::HotSwitchAnalysis& hot, int index, std::string& out) {
    using Kind = analysis::HotSwitchBreakdownRow::Kind;
    const std::vector<analysis::HotSwitchBreakdownRow> rows = analysis::breakdown_rows(hot);
    BarSeries bars;
    bars.series = {"time"};
    for (const analysis::HotSwitchBreakdownRow& row : rows) {
        bars.categories.push_back(row.kind == Kind::bucket      ? row.label + " " + row.layout
                                  : row.kind == Kind::switching ? std::string("others")
                                                                : std::string("rest"));
        bars.values.push_back({static_cast<double>(row.ns)});
    }
    bar_chart(out, "hot_switch", index, "time per bucket, switching and the rest", bars,
              [](double v) { return duration_text(v); });
    Table table("hot_switch_buckets",
                {"bucket", "layout", "documents", "tokens", "micro-batches", "time", "share"});
    for (const analysis::HotSwitchBreakdownRow& row : rows) {
        const bool bucket = row.kind == Kind::bucket;
        const auto count = [&](std::int64_t n) { return bucket ? int_cell(n) : text_cell(""); };
        table.add({text_cell(row.label), text_cell(row.layout), count(row.documents),
                   count(row.tokens), count(row.microbatches),
                   duration_cell(static_cast<double>(row.ns)),
                   percent_cell(static_cast<double>(row.ns), static_cast<double>(hot.step_ns))});
    }
    table.render(out);
}

void matrix(const analysis::HotSwitchAnalysis& hot, std::string& out) {
    out +=
        "<p class=\"caption\">Switch cost, layout i (row) → j (column): the mean time and bytes "
        "sent by all ranks per switch, with the count, the largest send of one rank and the "
        "bytes between nodes.</p>\n";
    std::vector<std::string> headers{"from \\ to"};
    headers.insert(headers.end(), hot.layouts.begin(), hot.layouts.end());
    Table table("hot_switch_matrix", headers);
    for (const std::string& from : hot.layouts) {
        std::vector<Cell> row{text_cell(from)};
        for (const std::string& to : hot.layouts) {
            const analysis::HotSwitchCost* cell = hot.cost(from, to);
            if (cell == nullptr || cell->count == 0) {
                row.push_back(text_cell(from == to ? "" : "—"));
                continue;
            }
            const double ns = static_cast<double>(cell->ns) / cell->count;
            const double bytes = cell->bytes / cell->count;
            row.push_back(
                {html_escape(duration_text(ns) + " / " + bytes_text(bytes)) + "<br><small>" +
                     std::to_string(cell->count) + " switches; largest send " +
                     html_escape(bytes_text(cell->largest_send_bytes)) + ", between nodes " +
                     html_escape(bytes_text(cell->inter_node_bytes / cell->count)) + "</small>",
                 format_fixed(ns, 0)});
        }
        table.add(std::move(row));
    }
    table.render(out);
}

}  // namespace

void hot_switch_section(const analysis::HotSwitchAnalysis& hot, const std::string& spec, int index,
                        std::string& out) {
    if (hot.empty()) {
        return;
    }
    out += heading(index, "hot-switch", "Hot switching") + "\n";
    out += "<p>Each step's documents ran by length bucket, each under its own layout" +
           (spec.empty() ? std::string() : " (<code>" + html_escape(spec) + "</code>)") + "; " +
           std::to_string(hot.steps) + " steps, " +
           html_escape(duration_text(static_cast<double>(hot.step_ns))) +
           " in all, of which switching (HotSPa's 'others') " +
           format_percent(static_cast<double>(hot.switching_ns), static_cast<double>(hot.step_ns)) +
           ".</p>\n";
    breakdown(hot, index, out);
    matrix(hot, out);
}

}  // namespace fulcrum::report
