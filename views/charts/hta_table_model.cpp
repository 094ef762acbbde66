#include "views/charts/hta_table_model.h"

#include <cmath>

#include "core/util/text_table.h"
#include "views/charts/chart_common.h"

namespace fulcrum::views {

namespace {

using Cell = HtaTableModel::Cell;
using namespace analysis;

Cell text(const QString& value) {
    return {value, value};
}
Cell text(std::string_view value) {
    return text(QString::fromUtf8(value.data(), qsizetype(value.size())));
}
Cell count(std::int64_t value) {
    return {QString::number(value), qlonglong(value)};
}
QString duration_text(std::int64_t ns) {
    return QString::fromStdString(format_duration(ns));
}
Cell duration(std::int64_t ns) {
    return {duration_text(ns), qlonglong(ns)};
}
Cell share(std::int64_t part, std::int64_t whole) {
    if (whole <= 0)
        return {charts::kUnknown, {}};
    const double fraction = double(part) / double(whole);
    return {QString::number(100.0 * fraction, 'f', 1) + QStringLiteral("%"), fraction};
}
Cell number(double value, int decimals) {
    return {QString::number(value, 'f', decimals), value};
}

QStringList headers_of(HtaTableModel::Table table) {
    using T = HtaTableModel::Table;
    switch (table) {
        case T::kernel_time:
            return {QObject::tr("rank"),        QObject::tr("span"),
                    QObject::tr("computation"), QObject::tr("communication"),
                    QObject::tr("memory"),      QObject::tr("comp+comm"),
                    QObject::tr("comp+mem"),    QObject::tr("comm+mem"),
                    QObject::tr("all three"),   QObject::tr("idle")};
        case T::top_kernels:
            return {QObject::tr("kernel"), QObject::tr("type"),  QObject::tr("count"),
                    QObject::tr("total"),  QObject::tr("mean"),  QObject::tr("min"),
                    QObject::tr("max"),    QObject::tr("ranks"), QObject::tr("slowest rank")};
        case T::idle:
            return {QObject::tr("rank"),  QObject::tr("stream"),     QObject::tr("kernels"),
                    QObject::tr("idle"),  QObject::tr("host wait"),  QObject::tr("kernel wait"),
                    QObject::tr("other"), QObject::tr("queue mean"), QObject::tr("queue max")};
        case T::launches:
            return {QObject::tr("rank"),           QObject::tr("launches"),
                    QObject::tr("delay (mean)"),   QObject::tr("delay (max)"),
                    QObject::tr("short kernels"),  QObject::tr("calls > 50 µs"),
                    QObject::tr("delays > 100 µs")};
        case T::communication_totals:
            return {QObject::tr("collective"),
                    QObject::tr("kind"),
                    QObject::tr("groups"),
                    QObject::tr("ranks a group"),
                    QObject::tr("calls"),
                    QObject::tr("bytes"),
                    QObject::tr("transfer"),
                    QObject::tr("wait"),
                    QObject::tr("algbw GB/s"),
                    QObject::tr("busbw GB/s"),
                    QObject::tr("slowest group busbw")};
        case T::communication:
            return {
                QObject::tr("collective"), QObject::tr("kind"),       QObject::tr("ranks"),
                QObject::tr("calls"),      QObject::tr("bytes"),      QObject::tr("transfer"),
                QObject::tr("wait"),       QObject::tr("algbw GB/s"), QObject::tr("busbw GB/s")};
        case T::critical_path:
            return {QObject::tr("step"),
                    QObject::tr("length"),
                    QObject::tr("segments"),
                    QObject::tr("passes"),
                    QObject::tr("pipeline transfer"),
                    QObject::tr("largest saving (what-if)")};
        case T::diff:
            return {QObject::tr("name"),   QObject::tr("kind"),
                    QObject::tr("change"), QObject::tr("count (reference)"),
                    QObject::tr("count"),  QObject::tr("time (reference)"),
                    QObject::tr("time"),   QObject::tr("Δ time")};
    }
    return {};
}

std::vector<Cell> kernel_time_row(const KernelTimeByType& row) {
    // KernelTimeByType::ns by the bit set of types running at once, in the columns' order.
    constexpr int kMasks[] = {0b001, 0b010, 0b100, 0b011, 0b101, 0b110, 0b111};
    std::vector<Cell> cells = {count(row.rank), duration(row.kernel_span_ns)};
    for (int mask : kMasks)
        cells.push_back(share(row.ns[mask], row.kernel_span_ns));
    cells.push_back(share(row.idle_ns, row.kernel_span_ns));
    return cells;
}

std::vector<Cell> communication_row(const CollectiveSummary& c) {
    QStringList ranks;
    for (std::int32_t rank : c.ranks)
        ranks << QString::number(rank);
    const bool measured = c.bytes > 0 && c.transfer_ns > 0;
    const Cell unknown{charts::kUnknown, {}};
    return {text(c.name),
            text(to_string(c.kind)),
            text(ranks.join(QStringLiteral(", "))),
            count(c.calls),
            c.bytes > 0 ? count(c.bytes) : unknown,
            duration(c.transfer_ns),
            duration(c.wait_ns),
            measured ? number(c.algbw_gb_s, 2) : unknown,
            measured ? number(c.busbw_gb_s, 2) : unknown};
}

std::vector<Cell> critical_path_row(const CriticalPath& path) {
    const std::int64_t length = path.end_ns - path.start_ns;
    std::int64_t passes = 0;
    for (const CriticalSegment& segment : path.segments) {
        if (segment.is_pass())
            passes += segment.duration_ns();
    }
    const auto transfer = path.by_what.find("pipeline transfer");
    const Cell saving =
        path.what_if.empty()
            ? Cell{charts::kUnknown, {}}
            : Cell{QObject::tr("%1 (rank %2, mb %3, %4)")
                       .arg(duration_text(path.what_if.front().step_saving_ns))
                       .arg(path.what_if.front().rank)
                       .arg(path.what_if.front().microbatch)
                       .arg(QString::fromUtf8(to_string(path.what_if.front().phase).data())),
                   qlonglong(path.what_if.front().step_saving_ns)};
    return {count(path.step),
            duration(length),
            count(qlonglong(path.segments.size())),
            share(passes, length),
            share(transfer != path.by_what.end() ? transfer->second : 0, length),
            saving};
}

std::vector<Cell> diff_row(const NameDiff& row) {
    return {text(row.name),
            text(to_string(row.kind)),
            text(row.added()     ? QObject::tr("added")
                 : row.removed() ? QObject::tr("removed")
                                 : QObject::tr("changed")),
            number(row.count_a, 2),
            number(row.count_b, 2),
            duration(std::llround(row.total_ns_a)),
            duration(std::llround(row.total_ns_b)),
            duration(std::llround(row.delta_ns()))};
}

}  // namespace

HtaTableModel::HtaTableModel(Table table, QObject* parent)
    : QAbstractTableModel(parent), table_(table), headers_(headers_of(table)) {}

void HtaTableModel::set_analysis(const RunAnalysis* analysis) {
    beginResetModel();
    rows_.clear();
    if (analysis != nullptr)
        fill(*analysis);
    endResetModel();
}

void HtaTableModel::fill(const RunAnalysis& a) {
    switch (table_) {
        case Table::kernel_time:
            for (const auto& row : a.kernels.time_by_type)
                rows_.push_back(kernel_time_row(row));
            break;
        case Table::top_kernels:
            for (const auto& s : a.kernels.top_kernels) {
                rows_.push_back({text(s.name), text(to_string(s.type)), count(s.count),
                                 duration(s.total_ns), duration(std::llround(s.mean_ns())),
                                 duration(s.min_ns), duration(s.max_ns), count(s.ranks),
                                 count(s.slowest_rank)});
            }
            break;
        case Table::idle:
            for (const auto& s : a.kernels.idle) {
                rows_.push_back({count(s.rank), text(s.lane), count(s.kernels),
                                 duration(s.idle_ns()), duration(s.host_wait_ns),
                                 duration(s.kernel_wait_ns), duration(s.other_ns),
                                 number(s.mean_queue_length, 2), count(s.max_queue_length)});
            }
            break;
        case Table::launches:
            for (const auto& s : a.kernels.launches) {
                rows_.push_back({count(s.rank), count(s.launches),
                                 duration(std::llround(s.mean_delay_ns())),
                                 duration(s.delay_max_ns), count(s.short_kernels),
                                 count(s.slow_calls), count(s.delay_outliers)});
            }
            break;
        case Table::communication_totals:
            for (const CollectiveTotal& c : total_collectives(a.communication)) {
                const bool measured = c.bytes > 0 && c.transfer_ns > 0;
                const Cell unknown{charts::kUnknown, {}};
                rows_.push_back(
                    {text(c.name), text(to_string(c.kind)), count(c.groups), count(c.group_size),
                     count(c.calls), c.bytes > 0 ? count(c.bytes) : unknown,
                     duration(c.transfer_ns), duration(c.wait_ns),
                     measured ? number(c.algbw_gb_s, 2) : unknown,
                     measured ? number(c.busbw_gb_s, 2) : unknown,
                     c.slowest_busbw_gb_s > 0 ? number(c.slowest_busbw_gb_s, 2) : unknown});
            }
            break;
        case Table::communication:
            for (const auto& c : a.communication)
                rows_.push_back(communication_row(c));
            break;
        case Table::critical_path:
            for (const auto& path : a.critical_paths)
                rows_.push_back(critical_path_row(path));
            break;
        case Table::diff:
            break;
    }
}

void HtaTableModel::set_diff(const RunDiff* diff) {
    beginResetModel();
    rows_.clear();
    if (diff != nullptr && table_ == Table::diff) {
        for (const auto& row : diff->rows)
            rows_.push_back(diff_row(row));
    }
    endResetModel();
}

int HtaTableModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int HtaTableModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(headers_.size());
}

QVariant HtaTableModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= rowCount() || index.column() >= columnCount())
        return {};
    const Cell& cell =
        rows_[static_cast<std::size_t>(index.row())][static_cast<std::size_t>(index.column())];
    switch (role) {
        case Qt::DisplayRole:
            return cell.text;
        case ValueRole:
            return cell.value;
        case Qt::TextAlignmentRole:
            return cell.value.typeId() == QMetaType::QString
                       ? QVariant(Qt::AlignLeft | Qt::AlignVCenter)
                       : QVariant(Qt::AlignRight | Qt::AlignVCenter);
        default:
            return {};
    }
}

QVariant HtaTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole || section < 0 ||
        section >= headers_.size()) {
        return {};
    }
    return headers_[section];
}

}  // namespace fulcrum::views
