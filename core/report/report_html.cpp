#include "core/report/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/report/report_assets.h"
#include "core/util/text_table.h"

namespace fulcrum::report {

std::string html_escape(std::string_view text) {
    std::string out;
    out.reserve(text.size() + text.size() / 8);
    for (const char c : text) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------
// Formatting

std::string duration_text(double ns) {
    return std::isfinite(ns) ? format_duration(static_cast<std::int64_t>(std::llround(ns)))
                             : kUnknownFigure;
}

std::string number(std::int64_t value) {
    return std::to_string(value);
}

// A coordinate in an SVG: one decimal is finer than a pixel.
std::string px(double value) {
    return format_fixed(value, 1);
}

// Truncates to at most `limit` bytes without cutting a UTF-8 sequence.
std::string_view clip(std::string_view text, std::size_t limit) {
    if (text.size() <= limit) {
        return text;
    }
    std::size_t end = limit;
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
        --end;
    }
    return text.substr(0, end);
}

// Sequential blue scale for heatmaps, t in [0, 1].
std::string heat_color(double t) {
    t = std::clamp(t, 0.0, 1.0);
    const int r = static_cast<int>(std::lround(239 - t * (239 - 8)));
    const int g = static_cast<int>(std::lround(243 - t * (243 - 48)));
    const int b = static_cast<int>(std::lround(255 - t * (255 - 107)));
    char text[16];
    std::snprintf(text, sizeof text, "#%02x%02x%02x", r, g, b);
    return text;
}

// ---------------------------------------------------------------------------------------
// Tables: sortable by clicking a header (the inline script); data-v holds the number sorted on.

Cell text_cell(std::string_view text) {
    return {html_escape(text), ""};
}
Cell int_cell(std::int64_t value) {
    return {number(value), number(value)};
}
Cell duration_cell(double ns) {
    return {duration_text(ns), std::isfinite(ns) ? format_fixed(ns, 0) : ""};
}
Cell fixed_cell(double value, int decimals) {
    return {format_fixed(value, decimals), std::isfinite(value) ? format_fixed(value, 6) : ""};
}
Cell percent_cell(double part, double whole) {
    return {format_percent(part, whole),
            whole > 0 && std::isfinite(part) ? format_fixed(part / whole, 6) : ""};
}
Cell figure_cell(const std::optional<double>& value, int decimals) {
    return fixed_cell(value ? *value : std::nan(""), decimals);
}
// A 4D coordinate; -1 is unknown (an imported trace without them).
std::string coordinate_text(std::int32_t value) {
    return value >= 0 ? std::to_string(value) : kUnknownFigure;
}
Cell coordinate_cell(std::int32_t value) {
    return value >= 0 ? int_cell(value) : Cell{kUnknownFigure, ""};
}

void Table::render(std::string& out) const {
    out += "<table class=\"sortable\" data-table=\"" + name_ + "\"><thead><tr>";
    for (const auto& header : headers_) {
        out += "<th>" + html_escape(header) + "</th>";
    }
    out += "</tr></thead><tbody>\n";
    for (const auto& row : rows_) {
        out += "<tr>";
        for (const auto& cell : row) {
            if (cell.sort.empty()) {
                out += "<td>" + cell.html + "</td>";
            } else {
                out += "<td data-v=\"" + cell.sort + "\">" + cell.html + "</td>";
            }
        }
        out += "</tr>\n";
    }
    out += "</tbody></table>\n";
}

// ---------------------------------------------------------------------------------------
// The page: every network request forbidden (Content-Security-Policy), style and script inline.

void open_document(std::string& out, std::string_view title, std::string_view caption) {
    out +=
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" +
        html_escape(title) + "</title>\n<style>";
    out += kReportCss;
    out += "</style>\n<script>";
    out += kReportErrorScript;
    out += "</script>\n</head><body>\n<pre id=\"report-errors\" hidden></pre>\n<header><h1>" +
           html_escape(title) + "</h1><p class=\"caption\">" + html_escape(caption) + "</p>\n";
}

void close_document(std::string& out) {
    out += "<div id=\"tip\" hidden></div>\n<script>";
    out += kReportScript;
    out += "</script>\n</body></html>\n";
}

// ---------------------------------------------------------------------------------------
// Charts: inline SVG. Every chart root is <svg class="chart" data-chart=NAME data-run=I>,
// every data mark has class "mark" and its tooltip in data-tip (escaped; the script shows it
// with textContent, never as HTML).

void open_chart(std::string& out, std::string_view name, int run, double width, double height,
                std::string_view label) {
    out += "<div class=\"chartbox\"><button class=\"reset\" type=\"button\">reset zoom</button>";
    out += "<svg class=\"chart\" data-chart=\"" + std::string(name) + "\" data-run=\"" +
           std::to_string(run) + "\" viewBox=\"0 0 " + px(width) + " " + px(height) +
           "\" width=\"" + px(width) + "\" height=\"" + px(height) +
           "\" role=\"img\" aria-label=\"" + html_escape(label) + "\">\n";
}

void close_chart(std::string& out) {
    out += "</svg></div>\n";
}

void svg_text(std::string& out, double x, double y, std::string_view content,
              std::string_view anchor, std::string_view extra) {
    out += "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\" text-anchor=\"" + std::string(anchor) +
           "\"" + std::string(extra) + ">" + html_escape(content) + "</text>";
}

void rect_mark(std::string& out, double x, double y, double w, double h, std::string_view fill,
               std::string_view tip, std::string_view cls) {
    out += "<rect class=\"" + std::string(cls) + "\" x=\"" + px(x) + "\" y=\"" + px(y) +
           "\" width=\"" + px(std::max(w, 0.0)) + "\" height=\"" + px(std::max(h, 0.0)) +
           "\" fill=\"" + std::string(fill) + "\" data-tip=\"" + html_escape(tip) + "\"/>";
}

void legend(std::string& out, double x, double y, const std::vector<std::string>& series) {
    for (std::size_t s = 0; s < series.size(); ++s) {
        out += "<rect x=\"" + px(x) + "\" y=\"" + px(y - 9) +
               "\" width=\"10\" height=\"10\" fill=\"" + kSeriesColors[s % 8] + "\"/>";
        svg_text(out, x + 14, y, series[s], "start");
        x += 24 + 7.0 * static_cast<double>(series[s].size());
    }
}

// The smallest 1, 2, 2.5 or 5 × 10^k at or above `value`, so gridlines fall on round numbers.
double nice_ceiling(double value) {
    if (!(value > 0)) {
        return 1;
    }
    const double power = std::pow(10.0, std::floor(std::log10(value)));
    for (const double step : {1.0, 2.0, 2.5, 5.0, 10.0}) {
        if (step * power >= value * (1 - 1e-12)) {
            return step * power;
        }
    }
    return 10 * power;
}

double legend_width(const std::vector<std::string>& series) {
    double width = 0;
    for (const auto& name : series) {
        width += 24 + 7.0 * static_cast<double>(name.size());
    }
    return width;
}

// A y axis from 0 to `top` with four gridlines, labelled by `format`.
void y_axis(std::string& out, double width, double plot_height, double top,
            const FigureFormat& format) {
    for (int i = 0; i <= 4; ++i) {
        const double value = top * i / 4.0;
        const double y = kMarginTop + plot_height - plot_height * i / 4.0;
        out += "<line class=\"grid\" x1=\"" + px(kMarginLeft) + "\" x2=\"" +
               px(width - kMarginRight) + "\" y1=\"" + px(y) + "\" y2=\"" + px(y) + "\"/>";
        svg_text(out, kMarginLeft - 4, y + 4, format(value), "end");
    }
}

// Stacked or grouped bars; one mark per finite value.
void bar_chart(std::string& out, std::string_view name, int run, std::string_view label,
               const BarSeries& bars, const FigureFormat& format) {
    const std::size_t n = bars.categories.size();
    const double slot = std::clamp(640.0 / std::max<std::size_t>(n, 1), 6.0, 120.0);
    const double width = kMarginLeft + kMarginRight + slot * static_cast<double>(n);
    const double plot_height = 220;
    const double height = kMarginTop + plot_height + kMarginBottom + 18;
    double top = 0;
    for (const auto& row : bars.values) {
        double sum = 0;
        for (const double v : row) {
            if (std::isfinite(v)) {
                sum = bars.stacked ? sum + std::max(v, 0.0) : std::max(sum, v);
            }
        }
        top = std::max(top, sum);
    }
    top = nice_ceiling(top);
    const double chart_width =
        std::max({width, 360.0, kMarginLeft + legend_width(bars.series) + kMarginRight});
    open_chart(out, name, run, chart_width, height, label);
    y_axis(out, chart_width, plot_height, top, format);
    const double base = kMarginTop + plot_height;
    const std::size_t label_every =
        std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(40.0 / slot)));
    for (std::size_t c = 0; c < n; ++c) {
        const double x0 = kMarginLeft + slot * static_cast<double>(c);
        const auto& row = bars.values[c];
        double stack = 0;
        const double group_width =
            (slot * 0.8) / static_cast<double>(std::max<std::size_t>(row.size(), 1));
        for (std::size_t s = 0; s < row.size(); ++s) {
            const double v = row[s];
            if (!std::isfinite(v)) {
                continue;
            }
            const double h = plot_height * std::max(v, 0.0) / top;
            const std::string tip = bars.categories[c] + " · " + bars.series[s] + ": " + format(v);
            if (bars.stacked) {
                rect_mark(out, x0 + slot * 0.1, base - stack - h, slot * 0.8, h,
                          kSeriesColors[s % 8], tip);
                stack += h;
            } else {
                rect_mark(out, x0 + slot * 0.1 + group_width * static_cast<double>(s), base - h,
                          group_width, h, kSeriesColors[s % 8], tip);
            }
        }
        if (c % label_every == 0) {
            svg_text(out, x0 + slot / 2, base + 14, bars.categories[c]);
        }
    }
    legend(out, kMarginLeft, height - 8, bars.series);
    close_chart(out);
}

std::string span_label(std::string_view what, std::int32_t first, std::int32_t last) {
    return first == last
               ? std::string(what) + " " + std::to_string(first)
               : std::string(what) + "s " + std::to_string(first) + "–" + std::to_string(last);
}

// A rank × column heatmap, one mark per cell (NaN cells grey); averaged into buckets when
// larger than the options allow.
void heatmap(std::string& out, std::string_view name, int run, std::string_view label,
             const analysis::Matrix& matrix, std::string_view column_name, int max_rows,
             int max_columns, const FigureFormat& format) {
    const Buckets rows(matrix.rows.size(), static_cast<std::size_t>(std::max(max_rows, 1)));
    const Buckets cols(matrix.columns.size(), static_cast<std::size_t>(std::max(max_columns, 1)));
    std::vector<double> cells(rows.count * cols.count, std::nan(""));
    double lo = INFINITY, hi = -INFINITY;
    for (std::size_t br = 0; br < rows.count; ++br) {
        for (std::size_t bc = 0; bc < cols.count; ++bc) {
            double sum = 0;
            int n = 0;
            for (std::size_t r = br * rows.size;
                 r < std::min((br + 1) * rows.size, matrix.rows.size()); ++r) {
                for (std::size_t c = bc * cols.size;
                     c < std::min((bc + 1) * cols.size, matrix.columns.size()); ++c) {
                    const double v = matrix.at(r, c);
                    if (std::isfinite(v)) {
                        sum += v;
                        ++n;
                    }
                }
            }
            if (n > 0) {
                const double mean = sum / n;
                cells[br * cols.count + bc] = mean;
                lo = std::min(lo, mean);
                hi = std::max(hi, mean);
            }
        }
    }
    const double cell_w = std::clamp(720.0 / std::max<std::size_t>(cols.count, 1), 4.0, 96.0);
    const double cell_h = std::clamp(400.0 / std::max<std::size_t>(rows.count, 1), 4.0, 26.0);
    const double width = kMarginLeft + kMarginRight + cell_w * static_cast<double>(cols.count);
    const double height = kMarginTop + cell_h * static_cast<double>(rows.count) + kMarginBottom;
    const std::string scale = std::string(column_name) + " →   scale " +
                              (std::isfinite(lo) ? format(lo) : "-") + " (light) … " +
                              (std::isfinite(hi) ? format(hi) : "-") + " (dark)";
    open_chart(out, name, run,
               std::max({width, 360.0, kMarginLeft + 6.5 * double(scale.size()) + kMarginRight}),
               height, label);
    const std::size_t row_label_every =
        std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(12.0 / cell_h)));
    const std::size_t col_label_every =
        std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(36.0 / cell_w)));
    for (std::size_t br = 0; br < rows.count; ++br) {
        const std::size_t r0 = br * rows.size;
        const std::size_t r1 = std::min((br + 1) * rows.size, matrix.rows.size()) - 1;
        const std::string row_label = span_label("rank", matrix.rows[r0], matrix.rows[r1]);
        const double y = kMarginTop + cell_h * static_cast<double>(br);
        if (br % row_label_every == 0) {
            svg_text(out, kMarginLeft - 4, y + cell_h / 2 + 4, row_label, "end");
        }
        for (std::size_t bc = 0; bc < cols.count; ++bc) {
            const std::size_t c0 = bc * cols.size;
            const std::size_t c1 = std::min((bc + 1) * cols.size, matrix.columns.size()) - 1;
            const double v = cells[br * cols.count + bc];
            const std::string tip =
                row_label + ", " + span_label(column_name, matrix.columns[c0], matrix.columns[c1]) +
                ": " + (std::isfinite(v) ? format(v) : std::string("no value")) +
                (rows.size > 1 || cols.size > 1 ? " (mean)" : "");
            const double t = hi > lo ? (v - lo) / (hi - lo) : 0.5;
            rect_mark(out, kMarginLeft + cell_w * static_cast<double>(bc), y, cell_w, cell_h,
                      std::isfinite(v) ? heat_color(t) : std::string("#dddddd"), tip,
                      std::isfinite(v) ? "mark" : "mark nan");
        }
    }
    const double base = kMarginTop + cell_h * static_cast<double>(rows.count);
    for (std::size_t bc = 0; bc < cols.count; bc += col_label_every) {
        svg_text(out, kMarginLeft + cell_w * (static_cast<double>(bc) + 0.5), base + 14,
                 std::to_string(matrix.columns[bc * cols.size]));
    }
    svg_text(out, kMarginLeft, base + 32, scale, "start");
    close_chart(out);
}

std::string heading(int index, std::string_view slug, std::string_view title) {
    return "<h3 id=\"run-" + std::to_string(index) + "-" + std::string(slug) + "\">" +
           std::string(title) + "</h3>";
}

}  // namespace fulcrum::report
