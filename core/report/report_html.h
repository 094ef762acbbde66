// The building blocks of the HTML report (docs/report.md): figures as text, cells of sortable
// tables, section headings, and charts drawn as inline SVG. The run report
// (html_report.cpp), HTA's sections (hta_sections.cpp) and the plan's section draw with these
// alone, so that every table sorts and every chart zooms and shows tooltips the same way
// (the script in report_assets.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/analysis/imbalance.h"

namespace fulcrum::report {

// Text and attribute contexts alike: & < > " ' become entities, so a name from a trace can
// never open a tag, close an attribute or start a script.
std::string html_escape(std::string_view text);

// ---- Figures ----

// A duration as format_duration writes it; kUnknownFigure when not finite.
std::string duration_text(double ns);
std::string number(std::int64_t value);
// A coordinate in an SVG: one decimal is finer than a pixel.
std::string px(double value);
// Truncates to at most `limit` bytes without cutting a UTF-8 sequence.
std::string_view clip(std::string_view text, std::size_t limit);
// Series colours, in order (Tableau 10).
inline constexpr const char* kSeriesColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                                "#59a14f", "#edc948", "#b07aa1", "#9c755f"};
// Sequential blue scale for heatmaps, t in [0, 1].
std::string heat_color(double t);

// ---- Tables: sortable by clicking a header; data-v holds the number sorted on ----

struct Cell {
    std::string html;  // already escaped
    std::string sort;  // a number, or "" to sort on the text
};
Cell text_cell(std::string_view text);
Cell int_cell(std::int64_t value);
Cell duration_cell(double ns);
Cell fixed_cell(double value, int decimals);
Cell percent_cell(double part, double whole);
Cell figure_cell(const std::optional<double>& value, int decimals);
// A 4D coordinate; -1 is unknown (an imported trace without them).
std::string coordinate_text(std::int32_t value);
Cell coordinate_cell(std::int32_t value);

class Table {
public:
    Table(std::string name, std::vector<std::string> headers)
        : name_(std::move(name)), headers_(std::move(headers)) {}
    void add(std::vector<Cell> row) { rows_.push_back(std::move(row)); }
    bool empty() const { return rows_.empty(); }
    std::size_t rows() const { return rows_.size(); }
    void render(std::string& out) const;

private:
    std::string name_;
    std::vector<std::string> headers_;
    std::vector<std::vector<Cell>> rows_;
};

// A section heading with an id to link to: run-INDEX-SLUG.
std::string heading(int index, std::string_view slug, std::string_view title);

// ---- The page ----

// <!DOCTYPE html> to the open <header> with `title` as <h1> and `caption` below it (both
// escaped); the caller closes the header.
void open_document(std::string& out, std::string_view title, std::string_view caption);
// The tooltip box, the script (report_assets.h) and the end of the page.
void close_document(std::string& out);

// ---- Charts: inline SVG ----
// Every chart root is <svg class="chart" data-chart=NAME data-run=I>, every data mark has
// class "mark" and its tooltip in data-tip (escaped; the script shows it with textContent,
// never as HTML).

using FigureFormat = std::function<std::string(double)>;

inline constexpr double kMarginLeft = 72, kMarginRight = 16, kMarginTop = 12, kMarginBottom = 40;

void open_chart(std::string& out, std::string_view name, int run, double width, double height,
                std::string_view label);
void close_chart(std::string& out);
void svg_text(std::string& out, double x, double y, std::string_view content,
              std::string_view anchor = "middle", std::string_view extra = "");
void rect_mark(std::string& out, double x, double y, double w, double h, std::string_view fill,
               std::string_view tip, std::string_view cls = "mark");
void legend(std::string& out, double x, double y, const std::vector<std::string>& series);
double legend_width(const std::vector<std::string>& series);
// The smallest 1, 2, 2.5 or 5 × 10^k at or above `value`, so gridlines fall on round numbers.
double nice_ceiling(double value);
// A y axis from 0 to `top` with four gridlines, labelled by `format`.
void y_axis(std::string& out, double width, double plot_height, double top,
            const FigureFormat& format);

struct BarSeries {
    std::vector<std::string> categories;      // x labels
    std::vector<std::string> series;          // legend
    std::vector<std::vector<double>> values;  // [category][series]; NaN: no bar
    bool stacked = true;
};
// Stacked or grouped bars; one mark per finite value.
void bar_chart(std::string& out, std::string_view name, int run, std::string_view label,
               const BarSeries& bars, const FigureFormat& format);

// Groups `n` items into at most `cap` buckets of consecutive items.
struct Buckets {
    std::size_t size = 1;  // items per bucket
    std::size_t count = 0;
    Buckets(std::size_t n, std::size_t cap) {
        size = n > cap ? (n + cap - 1) / cap : 1;
        count = (n + size - 1) / size;
    }
};
// "rank 3" or "ranks 3–5".
std::string span_label(std::string_view what, std::int32_t first, std::int32_t last);

// A rank × column heatmap, one mark per cell (NaN cells grey); averaged into buckets when
// larger than max_rows × max_columns.
void heatmap(std::string& out, std::string_view name, int run, std::string_view label,
             const analysis::Matrix& matrix, std::string_view column_name, int max_rows,
             int max_columns, const FigureFormat& format);

}  // namespace fulcrum::report
