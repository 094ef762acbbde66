#include "views/timeline/timeline_canvas.h"

#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QToolTip>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>
#include <functional>

#include "core/trace/annotations.h"
#include "views/common/palette.h"

namespace fulcrum::views::timeline {

namespace {

constexpr std::int64_t kMinWindowNs = 10;
constexpr int kLanePadding = 2;       // above and below a lane's sub-rows
constexpr int kMaxFlowsDrawn = 2000;  // more arrows than this are a smear, not information
constexpr double kLabelMinPx = 24.0;  // narrower boxes get no label

QColor text_on(const QColor& fill) {
    return fill.lightness() > 140 ? palette::ink() : QColor(Qt::white);
}

}  // namespace

QString format_duration(std::int64_t ns) {
    const double value = static_cast<double>(ns);
    const double magnitude = std::abs(value);
    auto with = [](double v, const char* unit) {
        const int decimals = std::abs(v) >= 100 ? 0 : std::abs(v) >= 10 ? 1 : 2;
        return QString::number(v, 'f', decimals) + QString::fromUtf8(unit);
    };
    if (magnitude < 1e3) {
        return QString::number(ns) + QStringLiteral(" ns");
    }
    if (magnitude < 1e6) {
        return with(value / 1e3, " µs");
    }
    if (magnitude < 1e9) {
        return with(value / 1e6, " ms");
    }
    return with(value / 1e9, " s");
}

TimelineCanvas::TimelineCanvas(QWidget* parent) : QWidget(parent) {
    setMouseTracking(true);
    setFocusPolicy(Qt::StrongFocus);
    setAttribute(Qt::WA_OpaquePaintEvent);
    setMinimumSize(kGutterWidth + 100, kAxisHeight + 60);
}

QColor TimelineCanvas::event_colour(const Event& event) const {
    const Phase kind = trace_ != nullptr ? pass_kind(*trace_, event) : Phase::none;
    return kind != Phase::none ? palette::phase(kind) : palette::category(event.category);
}

void TimelineCanvas::set_critical_passes(std::set<PassKey> keys) {
    critical_ = std::move(keys);
    update();
}

QColor TimelineCanvas::fold_colour(const Event& first) {
    const QColor colour = palette::category(first.category);
    const QColor grey(0x8a, 0x8f, 0x99);
    return QColor((colour.red() * 3 + grey.red() * 2) / 5,
                  (colour.green() * 3 + grey.green() * 2) / 5,
                  (colour.blue() * 3 + grey.blue() * 2) / 5);
}

void TimelineCanvas::set_data(const analysis::RunTrace* trace, const Layout* layout,
                              LaneTreeModel* model) {
    if (model_ != nullptr) {
        disconnect(model_, nullptr, this, nullptr);
    }
    if (paged_ != nullptr) {
        disconnect(paged_, nullptr, this, nullptr);
    }
    paged_ = nullptr;
    detail_.reset();
    selected_event_.reset();
    search_hit_event_.reset();
    trace_ = trace;
    layout_ = layout;
    model_ = model;
    names_.clear();
    name_widths_.clear();
    if (layout_ != nullptr) {
        names_.resize(layout_->max_name_id + 1);
        name_widths_.assign(layout_->max_name_id + 1, -1);
    }
    selected_.reset();
    search_hit_.reset();
    measure_end_ = -1;
    if (model_ != nullptr) {
        connect(model_, &QAbstractItemModel::modelReset, this, &TimelineCanvas::rebuild_bands);
        connect(model_, &QAbstractItemModel::dataChanged, this, &TimelineCanvas::rebuild_bands);
    }
    rebuild_bands();
    show_all();
}

void TimelineCanvas::set_paged(PagedTimeline* paged) {
    if (paged_ != nullptr) {
        disconnect(paged_, nullptr, this, nullptr);
    }
    paged_ = paged;
    detail_.reset();
    if (paged_ != nullptr) {
        connect(paged_, &PagedTimeline::detail_ready, this, &TimelineCanvas::adopt_detail);
        if (paged_->detail() != nullptr) {
            adopt_detail();
        }
    }
    update();
}

bool TimelineCanvas::row_has_detail(std::uint32_t row) const {
    return paged_ == nullptr ||
           (detail_ != nullptr && detail_->covers(row, window_start_, window_end_));
}

std::optional<EventRef> TimelineCanvas::find_in_detail(std::uint32_t row,
                                                       const Event& event) const {
    if (row >= layout_->rows.size()) {
        return std::nullopt;
    }
    const std::vector<Event>& events = layout_->rows[row].lane->events;
    auto it = std::lower_bound(events.begin(), events.end(), event.start_ns,
                               [](const Event& e, std::int64_t t) { return e.start_ns < t; });
    for (; it != events.end() && it->start_ns == event.start_ns; ++it) {
        if (*it == event) {
            return EventRef{row, static_cast<std::uint32_t>(it - events.begin())};
        }
    }
    return std::nullopt;
}

// A new detail of a paged run: its rows index the same lanes, but events by new positions;
// the selection and the search hit are found again by value (dropped when not loaded).
void TimelineCanvas::adopt_detail() {
    if (paged_ == nullptr || paged_->detail() == nullptr) {
        return;
    }
    // trace_ stays the skeleton: the detail's events carry the same name ids.
    detail_ = paged_->detail();
    layout_ = &detail_->layout;
    const std::optional<EventRef> old_selected = selected_;
    if (selected_ && selected_event_) {
        selected_ = find_in_detail(selected_->row, *selected_event_);
    }
    if (search_hit_ && search_hit_event_) {
        search_hit_ = find_in_detail(search_hit_->row, *search_hit_event_);
    }
    emit detail_changed();
    if (selected_ != old_selected) {
        emit selection_changed();
    }
    update();
}

void TimelineCanvas::rebuild_bands() {
    bands_.clear();
    band_of_row_.assign(layout_ != nullptr ? layout_->rows.size() : 0, -1);
    int y = 0;
    std::function<void(const QModelIndex&, int)> visit = [&](const QModelIndex& index, int depth) {
        Band band;
        band.node = index;
        band.kind =
            static_cast<LaneTreeModel::NodeKind>(index.data(LaneTreeModel::NodeKindRole).toInt());
        band.depth_in_tree = depth;
        band.y = y;
        band.expanded = index.data(LaneTreeModel::ExpandedRole).toBool();
        if (band.kind == LaneTreeModel::NodeKind::lane) {
            band.lane_row = index.data(LaneTreeModel::LaneRowRole).toInt();
            const int depths = std::max(1, layout_->rows[band.lane_row].depths());
            band.height = depths * kDepthHeight + 2 * kLanePadding;
            band_of_row_[band.lane_row] = static_cast<int>(bands_.size());
        } else {
            band.height = kHeaderHeight;
            if (band.kind == LaneTreeModel::NodeKind::rank && !band.expanded) {
                for (int c = 0; c < model_->rowCount(index); ++c) {
                    band.summary_rows.push_back(static_cast<std::uint32_t>(
                        model_->index(c, 0, index).data(LaneTreeModel::LaneRowRole).toInt()));
                }
            }
        }
        y += band.height;
        const bool expanded = band.expanded && band.kind != LaneTreeModel::NodeKind::lane;
        bands_.push_back(std::move(band));
        if (expanded) {
            for (int c = 0; c < model_->rowCount(index); ++c) {
                visit(model_->index(c, 0, index), depth + 1);
            }
        }
    };
    if (model_ != nullptr && layout_ != nullptr) {
        for (int r = 0; r < model_->rowCount(); ++r) {
            visit(model_->index(r, 0), 0);
        }
    }
    content_height_ = y;
    const int page = std::max(0, height() - kAxisHeight);
    emit scroll_range_changed(std::max(0, content_height_ - page), page);
    set_scroll(scroll_);
    update();
}

const TimelineCanvas::Band* TimelineCanvas::band_at(double y) const {
    const double content_y = y - kAxisHeight + scroll_;
    auto it = std::upper_bound(bands_.begin(), bands_.end(), content_y,
                               [](double v, const Band& band) { return v < band.y; });
    if (it == bands_.begin()) {
        return nullptr;
    }
    --it;
    return content_y < it->y + it->height ? &*it : nullptr;
}

int TimelineCanvas::band_of_row(std::uint32_t row) const {
    return row < band_of_row_.size() ? band_of_row_[row] : -1;
}

void TimelineCanvas::set_window(std::int64_t start_ns, std::int64_t end_ns) {
    if (end_ns - start_ns < kMinWindowNs) {
        const std::int64_t middle = start_ns + (end_ns - start_ns) / 2;
        start_ns = middle - kMinWindowNs / 2;
        end_ns = start_ns + kMinWindowNs;
    }
    if (start_ns == window_start_ && end_ns == window_end_) {
        return;
    }
    window_start_ = start_ns;
    window_end_ = end_ns;
    emit window_changed(window_start_, window_end_);
    update();
}

void TimelineCanvas::show_all() {
    if (layout_ == nullptr || layout_->end_ns <= layout_->start_ns) {
        set_window(0, 1'000'000);
        return;
    }
    const std::int64_t margin = (layout_->end_ns - layout_->start_ns) / 100;
    set_window(layout_->start_ns - margin, layout_->end_ns + margin);
}

void TimelineCanvas::zoom_about(double x, double factor) {
    const double anchor = static_cast<double>(time_at(x));
    const double start = anchor - (anchor - static_cast<double>(window_start_)) * factor;
    const double end = anchor + (static_cast<double>(window_end_) - anchor) * factor;
    set_window(static_cast<std::int64_t>(std::llround(start)),
               static_cast<std::int64_t>(std::llround(end)));
}

double TimelineCanvas::x_of(std::int64_t ns) const {
    return kGutterWidth + static_cast<double>(ns - window_start_) * time_area_width() /
                              static_cast<double>(window_end_ - window_start_);
}

std::int64_t TimelineCanvas::time_at(double x) const {
    return window_start_ +
           static_cast<std::int64_t>(
               std::llround((x - kGutterWidth) * static_cast<double>(window_end_ - window_start_) /
                            time_area_width()));
}

QRectF TimelineCanvas::event_rect(EventRef ref) const {
    const int band = band_of_row(ref.row);
    if (band < 0 || layout_ == nullptr) {
        return {};
    }
    const LaneRow& row = layout_->rows[ref.row];
    if (ref.event >= row.depth.size() || !row_has_detail(ref.row)) {
        return {};
    }
    const int depth = row.depth[ref.event];
    if (depth >= row.depths()) {
        return {};
    }
    const Event& event = row.lane->events[ref.event];
    const double x0 = x_of(event.start_ns);
    const double x1 = std::max(x0 + 1.0, x_of(event.end_ns));
    const double y = screen_y(bands_[band].y) + kLanePadding + depth * kDepthHeight;
    return QRectF(x0, y, x1 - x0, kDepthHeight - 1);
}

std::optional<PlanItem> TimelineCanvas::item_at_point(QPointF point, std::uint32_t* row_out) const {
    if (layout_ == nullptr || point.x() < kGutterWidth || point.y() < kAxisHeight) {
        return std::nullopt;
    }
    const Band* band = band_at(point.y());
    if (band == nullptr || band->kind != LaneTreeModel::NodeKind::lane) {
        return std::nullopt;
    }
    const LaneRow& row = layout_->rows[band->lane_row];
    if (!row_has_detail(static_cast<std::uint32_t>(band->lane_row))) {
        return std::nullopt;  // drawn from its summary: no event to point at yet
    }
    const int depth =
        static_cast<int>(std::floor((point.y() - screen_y(band->y) - kLanePadding) / kDepthHeight));
    if (depth < 0 || depth >= row.depths()) {
        return std::nullopt;
    }
    std::vector<PlanItem> plan;
    plan_row(row.lane->events, row.by_depth[depth], window_start_, window_end_, time_area_width(),
             kFoldPx, plan);
    // The item drawn under the point; boxes are at least one pixel wide, so allow one more.
    const PlanItem* best = nullptr;
    double best_distance = 2.0;
    for (const PlanItem& item : plan) {
        const double x0 = x_of(item.start_ns);
        const double x1 = std::max(x0 + 1.0, x_of(item.end_ns));
        const double distance = point.x() < x0   ? x0 - point.x()
                                : point.x() > x1 ? point.x() - x1
                                                 : 0.0;
        if (distance < best_distance) {
            best = &item;
            best_distance = distance;
        }
    }
    if (best == nullptr) {
        return std::nullopt;
    }
    *row_out = static_cast<std::uint32_t>(band->lane_row);
    return *best;
}

std::optional<EventRef> TimelineCanvas::event_at_point(QPointF point) const {
    std::uint32_t row = 0;
    const auto item = item_at_point(point, &row);
    if (!item || item->count != 1) {
        return std::nullopt;
    }
    return EventRef{row, item->first};
}

void TimelineCanvas::set_scroll(int y) {
    const int page = std::max(0, height() - kAxisHeight);
    const int clamped = std::clamp(y, 0, std::max(0, content_height_ - page));
    if (clamped == scroll_) {
        return;
    }
    scroll_ = clamped;
    emit scroll_changed(scroll_);
    update();
}

void TimelineCanvas::scroll_to_row(std::uint32_t row) {
    const int band = band_of_row(row);
    if (band < 0) {
        return;
    }
    const int page = std::max(0, height() - kAxisHeight);
    const Band& b = bands_[band];
    if (b.y < scroll_ || b.y + b.height > scroll_ + page) {
        // Its rank's header just above it, when there is room.
        set_scroll(std::max(0, b.y - 2 * kHeaderHeight));
    }
}

void TimelineCanvas::select(std::optional<EventRef> ref) {
    if (ref == selected_) {
        return;
    }
    selected_ = ref;
    selected_event_.reset();
    if (ref && layout_ != nullptr && ref->row < layout_->rows.size() &&
        ref->event < layout_->rows[ref->row].lane->events.size()) {
        selected_event_ = layout_->rows[ref->row].lane->events[ref->event];
    }
    emit selection_changed();
    update();
}

void TimelineCanvas::set_highlight(int step, int microbatch) {
    highlight_step_ = step;
    highlight_microbatch_ = microbatch;
    update();
}

void TimelineCanvas::set_measure(std::int64_t start_ns, std::int64_t end_ns) {
    measure_start_ = start_ns;
    measure_end_ = end_ns;
    if (end_ns >= start_ns) {
        emit status_message(QStringLiteral("Measured %1 (from %2 to %3)")
                                .arg(format_duration(end_ns - start_ns), format_duration(start_ns),
                                     format_duration(end_ns)));
    }
    update();
}

void TimelineCanvas::set_search_hit(std::optional<EventRef> ref) {
    search_hit_ = ref;
    search_hit_event_.reset();
    if (ref && layout_ != nullptr && ref->row < layout_->rows.size() &&
        ref->event < layout_->rows[ref->row].lane->events.size()) {
        search_hit_event_ = layout_->rows[ref->row].lane->events[ref->event];
    }
    update();
}

const QString& TimelineCanvas::name_text(StringId id, int* width) {
    static const QString empty;
    if (id.value >= names_.size()) {
        *width = 0;
        return empty;
    }
    QString& text = names_[id.value];
    if (name_widths_[id.value] < 0) {
        text = QString::fromUtf8(trace_->name(id).data(),
                                 static_cast<qsizetype>(trace_->name(id).size()));
        name_widths_[id.value] = fontMetrics().horizontalAdvance(text);
    }
    *width = name_widths_[id.value];
    return text;
}

// ---- painting ---------------------------------------------------------------------------

void TimelineCanvas::paintEvent(QPaintEvent* event) {
    QPainter painter(this);
    const QRect clip = event->rect();
    painter.fillRect(clip, background());
    painted_boxes_ = 0;
    painted_folds_ = 0;
    painted_critical_ = 0;
    painted_switches_ = 0;
    painted_bins_ = 0;
    if (layout_ == nullptr) {
        painter.setPen(palette::faint_ink());
        painter.drawText(rect(), Qt::AlignCenter, tr("No run open"));
        return;
    }
    const int top = kAxisHeight;
    const int bottom = height();
    // Bands are sorted by y: binary-search the first visible one.
    auto first = std::upper_bound(bands_.begin(), bands_.end(), scroll_,
                                  [](int v, const Band& band) { return v < band.y + band.height; });
    std::vector<const Band*> visible;
    for (auto it = first; it != bands_.end() && screen_y(it->y) < bottom; ++it) {
        visible.push_back(&*it);
    }
    painter.setClipRect(QRect(0, top, width(), bottom - top));
    const bool highlighting = highlight_step_ >= 0 || highlight_microbatch_ >= 0;
    for (const Band* band : visible) {
        const int y = static_cast<int>(screen_y(band->y));
        if (band->kind != LaneTreeModel::NodeKind::lane) {
            painter.fillRect(QRect(0, y, width(), band->height),
                             palette::band(band->kind == LaneTreeModel::NodeKind::group));
            if (!band->summary_rows.empty()) {
                paint_summary(painter, *band);
            }
        } else if (highlighting) {
            paint_highlight(painter, *band, false);
        }
        if (band->kind == LaneTreeModel::NodeKind::lane) {
            paint_lane(painter, *band, clip);
            if (highlighting) {
                paint_highlight(painter, *band, true);
            }
        }
        painter.setPen(palette::rule());
        painter.drawLine(0, y + band->height - 1, width(), y + band->height - 1);
    }
    paint_switches(painter);
    paint_flows(painter);
    if (paged_ != nullptr) {
        // Ask for the detail of every visible row at once (a detail replaces the last).
        wanted_rows_.clear();
        bool missing = false;
        for (const Band* band : visible) {
            if (band->lane_row >= 0) {
                wanted_rows_.push_back(static_cast<std::uint32_t>(band->lane_row));
            }
            wanted_rows_.insert(wanted_rows_.end(), band->summary_rows.begin(),
                                band->summary_rows.end());
        }
        for (std::uint32_t row : wanted_rows_) {
            missing |= !row_has_detail(row);
        }
        if (missing) {
            paged_->request(window_start_, window_end_, wanted_rows_);
        }
    }

    auto outline = [&](std::optional<EventRef> ref, const QColor& colour) {
        if (!ref) {
            return;
        }
        const QRectF box = event_rect(*ref);
        if (box.isNull()) {
            return;
        }
        painter.setPen(QPen(palette::ink(), 1));
        painter.setBrush(Qt::NoBrush);
        painter.drawRect(box.adjusted(-2, -2, 2, 2));
        painter.setPen(QPen(colour, 2));
        painter.drawRect(box.adjusted(-1, -1, 1, 1));
    };
    outline(search_hit_, palette::search_hit());
    outline(selected_, palette::highlight());

    // Gutter: row headers over everything drawn in the time area.
    painter.setClipRect(QRect(0, top, kGutterWidth, bottom - top));
    for (const Band* band : visible) {
        const int y = static_cast<int>(screen_y(band->y));
        const QRect gutter(0, y, kGutterWidth, band->height);
        painter.fillRect(gutter,
                         palette::gutter(band->kind == LaneTreeModel::NodeKind::group  ? 0
                                         : band->kind == LaneTreeModel::NodeKind::rank ? 1
                                                                                       : 2));
        QString label = band->node.data(Qt::DisplayRole).toString();
        if (band->kind != LaneTreeModel::NodeKind::lane) {
            label = (band->expanded ? QStringLiteral("▾ ") : QStringLiteral("▸ ")) + label;
        }
        const int indent = 4 + 12 * band->depth_in_tree;
        painter.setPen(palette::ink());
        const QRect text_box(indent, y, kGutterWidth - indent - 4,
                             std::min(band->height, kHeaderHeight));
        painter.drawText(text_box, Qt::AlignVCenter | Qt::AlignLeft,
                         fontMetrics().elidedText(label, Qt::ElideRight, text_box.width()));
        painter.setPen(palette::gutter_rule());
        painter.drawLine(0, y + band->height - 1, kGutterWidth, y + band->height - 1);
    }
    painter.setClipping(false);
    painter.setPen(palette::frame());
    painter.drawLine(kGutterWidth - 1, top, kGutterWidth - 1, bottom);

    // Measured interval and the range being dragged.
    auto span_overlay = [&](std::int64_t a, std::int64_t b, const QColor& fill, bool label) {
        const double x0 = std::max<double>(kGutterWidth, x_of(std::min(a, b)));
        const double x1 = std::min<double>(width(), x_of(std::max(a, b)));
        if (x1 < x0) {
            return;
        }
        painter.fillRect(QRectF(x0, top, std::max(1.0, x1 - x0), bottom - top), fill);
        painter.setPen(fill.darker(200));
        painter.drawLine(QPointF(x0, top), QPointF(x0, bottom));
        painter.drawLine(QPointF(x1, top), QPointF(x1, bottom));
        if (label) {
            const QString text = format_duration(std::max(a, b) - std::min(a, b));
            const int w = fontMetrics().horizontalAdvance(text) + 8;
            const QRectF box((x0 + x1) / 2 - w / 2.0, top + 2, w, kHeaderHeight - 2);
            painter.fillRect(box, palette::label_background());
            painter.setPen(Qt::white);
            painter.drawText(box, Qt::AlignCenter, text);
        }
    };
    if (measure_end_ >= measure_start_) {
        QColor measured_span = palette::search_hit();
        measured_span.setAlpha(50);
        span_overlay(measure_start_, measure_end_, measured_span, true);
    }
    if (drag_ == Drag::zoom_select) {
        span_overlay(drag_start_ns_, time_at(last_pos_.x()), palette::selection_shade(), true);
    }
    paint_axis(painter);
}

void TimelineCanvas::paint_lane(QPainter& painter, const Band& band, const QRect&) {
    if (!row_has_detail(static_cast<std::uint32_t>(band.lane_row))) {
        paint_lane_bins(painter, band);
        return;
    }
    const LaneRow& row = layout_->rows[band.lane_row];
    const std::vector<Event>& events = row.lane->events;
    const double area = time_area_width();
    const int left = kGutterWidth - 1;
    const int right = width() + 1;
    const QFontMetrics metrics = fontMetrics();
    for (int depth = 0; depth < row.depths(); ++depth) {
        plan_.clear();
        plan_row(events, row.by_depth[depth], window_start_, window_end_, area, kFoldPx, plan_);
        const int y = static_cast<int>(screen_y(band.y)) + kLanePadding + depth * kDepthHeight;
        const int h = kDepthHeight - 1;
        for (const PlanItem& item : plan_) {
            const double fx0 = std::clamp(x_of(item.start_ns), static_cast<double>(left),
                                          static_cast<double>(right));
            const double fx1 = std::clamp(x_of(item.end_ns), static_cast<double>(left),
                                          static_cast<double>(right));
            const int x0 = static_cast<int>(std::floor(fx0));
            const int w = std::max(1, static_cast<int>(std::floor(fx1)) - x0);
            if (item.count > 1) {
                ++painted_folds_;
                painter.fillRect(QRect(x0, y, w, h), fold_colour(events[item.first]));
                if (w >= 40) {
                    painter.setPen(Qt::white);
                    painter.drawText(QRect(x0 + 2, y, w - 4, h), Qt::AlignCenter,
                                     QString::number(item.count));
                }
                continue;
            }
            ++painted_boxes_;
            const Event& event = events[item.first];
            const QColor fill = event_colour(event);
            // Touching boxes keep a one-pixel seam so neighbours stay apart.
            painter.fillRect(QRect(x0, y, w > 4 ? w - 1 : w, h), fill);
            const Phase kind = critical_.empty() ? Phase::none : pass_kind(*trace_, event);
            if (kind != Phase::none &&
                critical_.count({row.lane->info.rank, event.step, event.microbatch, kind}) > 0) {
                ++painted_critical_;
                painter.setPen(QPen(palette::critical(), 2));
                painter.setBrush(Qt::NoBrush);
                painter.drawRect(QRectF(x0 + 1, y + 1, std::max(1, w - 3), h - 2));
            }
            if (w >= kLabelMinPx) {
                int text_width = 0;
                const QString& name = name_text(event.name, &text_width);
                const int room = w - 6;
                painter.setPen(text_on(fill));
                const QRect text_box(std::max(x0, kGutterWidth) + 3, y, room, h);
                if (text_width <= room) {
                    painter.drawText(text_box, Qt::AlignVCenter | Qt::AlignLeft, name);
                } else {
                    const QString elided = metrics.elidedText(name, Qt::ElideRight, room);
                    if (elided.size() > 1) {
                        painter.drawText(text_box, Qt::AlignVCenter | Qt::AlignLeft, elided);
                    }
                }
            }
        }
    }
}

void TimelineCanvas::paint_summary(QPainter& painter, const Band& band) {
    // A collapsed rank shows the top level of each of its lanes in its header, thinly.
    const double area = time_area_width();
    const int y = static_cast<int>(screen_y(band.y)) + 4;
    for (std::uint32_t r : band.summary_rows) {
        if (!row_has_detail(r)) {
            paint_header_bins(painter, r, y);
            continue;
        }
        const LaneRow& row = layout_->rows[r];
        if (row.depths() == 0) {
            continue;
        }
        plan_.clear();
        plan_row(row.lane->events, row.by_depth[0], window_start_, window_end_, area, kFoldPx,
                 plan_);
        for (const PlanItem& item : plan_) {
            const double x0 = std::max<double>(kGutterWidth - 1, x_of(item.start_ns));
            const double x1 = std::min<double>(width() + 1, x_of(item.end_ns));
            const QColor fill = item.count > 1
                                    ? fold_colour(row.lane->events[item.first])
                                    : palette::category(row.lane->events[item.first].category);
            painter.fillRect(QRectF(x0, y, std::max(1.0, x1 - x0), kHeaderHeight - 8), fill);
        }
    }
}

namespace {

// The bins of a summary level that overlap [t0, t1).
std::pair<const store::SummaryBin*, const store::SummaryBin*> bins_in(
    const store::SummaryLevel& level, std::int64_t t0, std::int64_t t1) {
    const std::int64_t first = t0 >> level.shift;
    const std::int64_t last = (t1 - 1) >> level.shift;
    const auto* begin = level.bins.data();
    const auto* end = begin + level.bins.size();
    const auto* from = std::lower_bound(
        begin, end, first,
        [](const store::SummaryBin& bin, std::int64_t i) { return bin.index < i; });
    const auto* to = std::upper_bound(
        from, end, last,
        [](std::int64_t i, const store::SummaryBin& bin) { return i < bin.index; });
    return {from, to};
}

}  // namespace

// A row of a paged run before its detail arrives: per bin of the coarsest summary level whose
// bins are at most kFoldPx wide, the top row filled in the colour of what covered most of the
// bin, stronger the busier it was, and the sub-rows down to the deepest nesting shaded grey.
// Adjacent bins that look the same are one rectangle, so a frame costs rows × distinct runs, not
// rows × pixels.
void TimelineCanvas::paint_lane_bins(QPainter& painter, const Band& band) {
    const store::LaneSummary* summary = paged_->summary(static_cast<std::uint32_t>(band.lane_row));
    if (summary == nullptr) {
        return;
    }
    const double ns_per_px = static_cast<double>(window_end_ - window_start_) / time_area_width();
    // Bins up to the fold width: what plan_row would fold into blocks anyway.
    const store::SummaryLevel* level = summary->level_for(kFoldPx * ns_per_px);
    if (level == nullptr) {
        return;
    }
    const int top = static_cast<int>(screen_y(band.y)) + kLanePadding;
    const int h = kDepthHeight - 1;
    const double left = kGutterWidth - 1;
    const double right = width() + 1;
    const auto [from, to] = bins_in(*level, window_start_, window_end_);
    const double bin_ns = static_cast<double>(level->bin_ns());
    // A run of adjacent bins that look the same: one rectangle, one colour look-up.
    struct Run {
        double x0 = 0, x1 = 0;
        StringId name;
        Category category = Category::other;
        int opacity = -1;  // -1: the top sub-row is empty
        int depth = 0;
    };
    std::optional<Run> run;
    auto flush = [&] {
        if (!run) {
            return;
        }
        const int x0 = static_cast<int>(std::floor(run->x0));
        const int w = std::max(1, static_cast<int>(std::floor(run->x1)) - x0);
        if (run->opacity >= 0) {
            Event shown;
            shown.name = run->name;
            shown.category = run->category;
            // Washed towards the background by idleness; opaque, so the fill is a plain copy.
            const QColor colour = event_colour(shown);
            const QColor back = background();
            const int a = 95 + 20 * run->opacity;
            const QColor fill((colour.red() * a + back.red() * (255 - a)) / 255,
                              (colour.green() * a + back.green() * (255 - a)) / 255,
                              (colour.blue() * a + back.blue() * (255 - a)) / 255);
            painter.fillRect(QRect(x0, top, w, h), fill);
        }
        if (run->depth > 0) {
            painter.fillRect(QRect(x0, top + kDepthHeight, w, run->depth * kDepthHeight - 1),
                             QColor(0xd2, 0xd4, 0xd8));  // fold grey at 43% on white
        }
        run.reset();
    };
    for (const store::SummaryBin* bin = from; bin != to; ++bin) {
        ++painted_bins_;
        const std::int64_t start = bin->index << level->shift;
        const double x0 = std::clamp(x_of(start), left, right);
        const double x1 = std::clamp(x_of(start + level->bin_ns()), left, right);
        // Eight steps of opacity by how busy the bin was, so that runs of equal bins merge.
        const double busy = std::min(1.0, static_cast<double>(bin->busy_ns) / bin_ns);
        const int opacity =
            bin->busy_ns > 0 || bin->name.valid() ? static_cast<int>(std::lround(busy * 8)) : -1;
        const int depth = std::min<int>(bin->max_depth, std::max(0, summary->depths - 1));
        if (run && run->opacity == opacity && run->depth == depth && run->name == bin->name &&
            run->category == bin->category && x0 <= run->x1 + 0.5) {
            run->x1 = x1;
            continue;
        }
        flush();
        run = Run{x0, x1, bin->name, bin->category, opacity, depth};
    }
    flush();
}

// A collapsed rank's header, for a lane of a paged run without detail: its busy bins, thinly.
void TimelineCanvas::paint_header_bins(QPainter& painter, std::uint32_t row, int y) {
    const store::LaneSummary* summary = paged_->summary(row);
    if (summary == nullptr) {
        return;
    }
    const double ns_per_px = static_cast<double>(window_end_ - window_start_) / time_area_width();
    const store::SummaryLevel* level = summary->level_for(ns_per_px);
    if (level == nullptr) {
        return;
    }
    const auto [from, to] = bins_in(*level, window_start_, window_end_);
    for (const store::SummaryBin* bin = from; bin != to; ++bin) {
        if (bin->busy_ns == 0) {
            continue;
        }
        ++painted_bins_;
        const std::int64_t start = bin->index << level->shift;
        const double x0 = std::max<double>(kGutterWidth - 1, x_of(start));
        const double x1 = std::min<double>(width() + 1, x_of(start + level->bin_ns()));
        painter.fillRect(QRectF(x0, y, std::max(1.0, x1 - x0), kHeaderHeight - 8),
                         palette::category(bin->category));
    }
}

void TimelineCanvas::paint_highlight(QPainter& painter, const Band& band, bool outline) {
    const int y = static_cast<int>(screen_y(band.y));
    const QColor colour = palette::highlight();
    QColor shade = colour;
    shade.setAlpha(60);
    for (const WorkSpan& span : layout_->spans[band.lane_row]) {
        if (span.end_ns < window_start_ || span.start_ns > window_end_) {
            continue;
        }
        if ((highlight_step_ >= 0 && span.step != highlight_step_) ||
            (highlight_microbatch_ >= 0 && span.microbatch != highlight_microbatch_)) {
            continue;
        }
        const double x0 = std::max<double>(kGutterWidth - 2, x_of(span.start_ns));
        const double x1 = std::min<double>(width() + 2, x_of(span.end_ns));
        const QRectF box(x0, y + 1, std::max(2.0, x1 - x0), band.height - 3);
        if (outline) {
            painter.setPen(QPen(colour, 2));
            painter.setBrush(Qt::NoBrush);
            painter.drawRect(box);
        } else {
            painter.fillRect(box, shade);
        }
    }
}

void TimelineCanvas::set_switch_marks(std::vector<SwitchMark> marks) {
    std::sort(marks.begin(), marks.end(),
              [](const SwitchMark& a, const SwitchMark& b) { return a.start_ns < b.start_ns; });
    switch_marks_ = std::move(marks);
    update();
}

namespace {
constexpr double kSwitchMinPx = 3.0;  // a switch of a few µs stays visible zoomed out
}

QString TimelineCanvas::switch_text_at(double x) const {
    if (x < kGutterWidth) {
        return {};
    }
    for (const SwitchMark& mark : switch_marks_) {
        const double left = x_of(mark.start_ns);
        const double right = std::max(x_of(mark.end_ns), left + kSwitchMinPx);
        if (x >= left && x <= right) {
            return mark.text;
        }
    }
    return {};
}

// A band over every row, under the flows and outlines: every rank switches at once.
void TimelineCanvas::paint_switches(QPainter& painter) {
    auto first =
        std::lower_bound(switch_marks_.begin(), switch_marks_.end(), window_start_,
                         [](const SwitchMark& mark, std::int64_t t) { return mark.end_ns < t; });
    const QColor shade = palette::switch_shade();
    QColor edge = shade;
    edge.setAlpha(200);
    for (auto it = first; it != switch_marks_.end() && it->start_ns <= window_end_; ++it) {
        const double left = std::max<double>(x_of(it->start_ns), kGutterWidth);
        const double right = std::max(x_of(it->end_ns), left + kSwitchMinPx);
        const QRectF band(left, kAxisHeight, right - left, height() - kAxisHeight);
        painter.fillRect(band, shade);
        painter.setPen(QPen(edge, 1));
        painter.drawLine(band.topLeft(), band.bottomLeft());
        ++painted_switches_;
    }
}

bool TimelineCanvas::event(QEvent* event) {
    if (event->type() == QEvent::ToolTip) {
        const auto* help = static_cast<QHelpEvent*>(event);
        const QString text = switch_text_at(help->pos().x());
        if (text.isEmpty()) {
            QToolTip::hideText();
            event->ignore();
        } else {
            QToolTip::showText(help->globalPos(), text, this);
        }
        return true;
    }
    return QWidget::event(event);
}

void TimelineCanvas::paint_flows(QPainter& painter) {
    const std::vector<Flow>& flows = layout_->flows;
    if (flows.empty()) {
        return;
    }
    auto first = std::lower_bound(flows.begin(), flows.end(), window_start_,
                                  [](const Flow& f, std::int64_t t) { return f.kernel_ns < t; });
    auto last = std::upper_bound(flows.begin(), flows.end(), window_end_,
                                 [](std::int64_t t, const Flow& f) { return t < f.kernel_ns; });
    if (last - first > kMaxFlowsDrawn) {
        return;
    }
    painter.save();
    painter.setRenderHint(QPainter::Antialiasing, true);
    const QColor colour(0x30, 0x30, 0x30, 180);
    painter.setPen(QPen(colour, 1));
    painter.setBrush(colour);
    for (auto it = first; it != last; ++it) {
        const QRectF launch = event_rect({it->host_row, it->host_event});
        const QRectF kernel = event_rect({it->device_row, it->device_event});
        if (launch.isNull() || kernel.isNull()) {
            continue;
        }
        const bool down = kernel.top() >= launch.bottom();
        const QPointF from(launch.left(), down ? launch.bottom() : launch.top());
        const QPointF to(kernel.left(), down ? kernel.top() : kernel.bottom());
        painter.drawLine(from, to);
        // Arrow head along the line's direction.
        const QPointF d = to - from;
        const double length = std::hypot(d.x(), d.y());
        if (length < 1) {
            continue;
        }
        const QPointF u = d / length;
        const QPointF n(-u.y(), u.x());
        QPolygonF head;
        head << to << to - u * 6 + n * 3 << to - u * 6 - n * 3;
        painter.drawPolygon(head);
    }
    painter.restore();
}

void TimelineCanvas::paint_axis(QPainter& painter) {
    painter.fillRect(QRect(0, 0, width(), kAxisHeight), palette::surface());
    painter.setPen(palette::frame());
    painter.drawLine(0, kAxisHeight - 1, width(), kAxisHeight - 1);
    const double ns_per_px = static_cast<double>(window_end_ - window_start_) / time_area_width();
    // A 1-2-5 step that puts ticks at least ~90 px apart.
    const double wanted = ns_per_px * 90;
    double step = std::pow(10.0, std::floor(std::log10(std::max(1.0, wanted))));
    for (double m : {1.0, 2.0, 5.0, 10.0}) {
        if (step * m >= wanted) {
            step *= m;
            break;
        }
    }
    const auto tick = static_cast<std::int64_t>(std::max(1.0, step));
    std::int64_t t =
        window_start_ >= 0 ? (window_start_ + tick - 1) / tick * tick : window_start_ / tick * tick;
    painter.setPen(palette::axis_ink());
    for (; t <= window_end_; t += tick) {
        const double x = x_of(t);
        painter.drawLine(QPointF(x, kAxisHeight - 6), QPointF(x, kAxisHeight - 1));
        painter.drawText(QRectF(x + 3, 0, 120, kAxisHeight - 4), Qt::AlignVCenter | Qt::AlignLeft,
                         format_duration(t));
    }
    painter.fillRect(QRect(0, 0, kGutterWidth, kAxisHeight), palette::surface());
    painter.drawText(
        QRect(6, 0, kGutterWidth - 8, kAxisHeight), Qt::AlignVCenter | Qt::AlignLeft,
        QStringLiteral("%1 visible").arg(format_duration(window_end_ - window_start_)));
}

// ---- interaction ------------------------------------------------------------------------

void TimelineCanvas::resizeEvent(QResizeEvent* event) {
    QWidget::resizeEvent(event);
    const int page = std::max(0, height() - kAxisHeight);
    emit scroll_range_changed(std::max(0, content_height_ - page), page);
    set_scroll(scroll_);
}

void TimelineCanvas::mousePressEvent(QMouseEvent* event) {
    setFocus();
    press_pos_ = last_pos_ = event->position();
    drag_start_ns_ = time_at(press_pos_.x());
    if (event->button() == Qt::LeftButton) {
        if (event->modifiers() & Qt::ControlModifier) {
            drag_ = Drag::measure;
        } else if (event->modifiers() & Qt::ShiftModifier) {
            drag_ = Drag::zoom_select;
        } else {
            drag_ = Drag::pending;
        }
    } else if (event->button() == Qt::RightButton) {
        drag_ = Drag::zoom_select;
    } else if (event->button() == Qt::MiddleButton) {
        drag_ = Drag::pan;
    }
}

void TimelineCanvas::mouseMoveEvent(QMouseEvent* event) {
    const QPointF pos = event->position();
    switch (drag_) {
        case Drag::none:
            emit_hover(pos);
            return;
        case Drag::pending:
            if ((pos - press_pos_).manhattanLength() < 4) {
                return;
            }
            drag_ = Drag::pan;
            [[fallthrough]];
        case Drag::pan: {
            const double ns_per_px =
                static_cast<double>(window_end_ - window_start_) / time_area_width();
            const auto shift =
                static_cast<std::int64_t>(std::llround((pos.x() - last_pos_.x()) * ns_per_px));
            set_window(window_start_ - shift, window_end_ - shift);
            set_scroll(scroll_ - static_cast<int>(std::lround(pos.y() - last_pos_.y())));
            break;
        }
        case Drag::zoom_select:
            update();
            break;
        case Drag::measure: {
            const std::int64_t now = time_at(pos.x());
            set_measure(std::min(drag_start_ns_, now), std::max(drag_start_ns_, now));
            break;
        }
    }
    last_pos_ = pos;
}

void TimelineCanvas::mouseReleaseEvent(QMouseEvent* event) {
    const QPointF pos = event->position();
    const Drag drag = drag_;
    drag_ = Drag::none;
    last_pos_ = pos;
    if (drag == Drag::pending) {
        click(pos);
    } else if (drag == Drag::zoom_select) {
        if (std::abs(pos.x() - press_pos_.x()) > 3) {
            const std::int64_t now = time_at(pos.x());
            set_window(std::min(drag_start_ns_, now), std::max(drag_start_ns_, now));
        }
        update();
    }
}

void TimelineCanvas::click(QPointF point) {
    if (point.y() < kAxisHeight || layout_ == nullptr) {
        return;
    }
    const Band* band = band_at(point.y());
    if (band != nullptr && band->kind != LaneTreeModel::NodeKind::lane &&
        (point.x() < kGutterWidth || band->kind == LaneTreeModel::NodeKind::group)) {
        model_->setData(band->node, !band->expanded, LaneTreeModel::ExpandedRole);
        return;
    }
    std::uint32_t row = 0;
    const auto item = item_at_point(point, &row);
    if (!item) {
        select(std::nullopt);
        return;
    }
    if (item->count == 1) {
        select(EventRef{row, item->first});
        return;
    }
    // A folded block: zoom until its events can be told apart.
    const std::int64_t margin =
        std::max<std::int64_t>((item->end_ns - item->start_ns) / 10, kMinWindowNs);
    set_window(item->start_ns - margin, item->end_ns + margin);
}

void TimelineCanvas::emit_hover(QPointF point) {
    std::uint32_t row = 0;
    const auto item = item_at_point(point, &row);
    QString text;
    if (item && item->count == 1) {
        const Event& event = layout_->rows[row].lane->events[item->first];
        text = QStringLiteral("%1 — %2").arg(
            QString::fromUtf8(trace_->name(event.name).data(),
                              static_cast<qsizetype>(trace_->name(event.name).size())),
            format_duration(event.duration_ns()));
        if (const Phase kind = pass_kind(*trace_, event); kind != Phase::none) {
            text += QStringLiteral(" — %1").arg(
                pass_label(kind, event.microbatch, chunk_of_args(trace_->name(event.args))));
            if (critical_.count(
                    {layout_->rows[row].lane->info.rank, event.step, event.microbatch, kind}) > 0) {
                text += tr(" — on the critical path");
            }
        }
    } else if (item) {
        text = QStringLiteral("%1 events folded (%2); click to zoom in")
                   .arg(item->count)
                   .arg(format_duration(item->end_ns - item->start_ns));
    }
    if (const QString switched = switch_text_at(point.x()); !switched.isEmpty()) {
        text = text.isEmpty() ? switched : text + QStringLiteral(" — ") + switched;
    }
    if (!text.isEmpty() && text != last_status_) {
        last_status_ = text;
        emit status_message(text);
    }
}

void TimelineCanvas::wheelEvent(QWheelEvent* event) {
    const QPoint delta = event->angleDelta();
    if (event->modifiers() & Qt::ShiftModifier) {
        set_scroll(scroll_ - (delta.y() != 0 ? delta.y() : delta.x()));
    } else if (delta.y() != 0) {
        zoom_about(std::max<double>(kGutterWidth, event->position().x()),
                   std::pow(0.85, delta.y() / 120.0));
    } else if (delta.x() != 0) {
        const std::int64_t span = window_end_ - window_start_;
        const auto shift =
            static_cast<std::int64_t>(-delta.x() / 120.0 * 0.1 * static_cast<double>(span));
        set_window(window_start_ + shift, window_end_ + shift);
    }
    event->accept();
}

void TimelineCanvas::keyPressEvent(QKeyEvent* event) {
    const std::int64_t span = window_end_ - window_start_;
    const double middle = kGutterWidth + time_area_width() / 2;
    switch (event->key()) {
        case Qt::Key_W:
            zoom_about(middle, 0.8);
            break;
        case Qt::Key_S:
            zoom_about(middle, 1.25);
            break;
        case Qt::Key_A:
            set_window(window_start_ - span / 10, window_end_ - span / 10);
            break;
        case Qt::Key_D:
            set_window(window_start_ + span / 10, window_end_ + span / 10);
            break;
        case Qt::Key_Home:
            show_all();
            break;
        case Qt::Key_Escape:
            select(std::nullopt);
            set_measure(0, -1);
            break;
        default:
            QWidget::keyPressEvent(event);
            return;
    }
    event->accept();
}

}  // namespace fulcrum::views::timeline
