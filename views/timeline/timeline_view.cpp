#include "views/timeline/timeline_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollBar>
#include <QSpinBox>
#include <QSplitter>
#include <QTextBrowser>
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "core/analysis/passes.h"
#include "core/trace/annotations.h"
#include "core/util/text_table.h"

namespace fulcrum::views {

using timeline::EventRef;
using timeline::Grouping;

namespace {

QString text_of(std::string_view text) {
    return QString::fromUtf8(text.data(), static_cast<qsizetype>(text.size()));
}

QString optional_text(std::string_view text) {
    return text.empty() ? QStringLiteral("—") : text_of(text);
}

QString optional_number(std::int64_t value) {
    return value < 0 ? QStringLiteral("—") : QString::number(value);
}

QString bytes_text(double bytes) {
    return QString::fromStdString(format_bytes(std::llround(bytes)));
}

// Each `hot-switch` range of rank 0 (every rank switches at once), with what moved.
std::vector<timeline::TimelineCanvas::SwitchMark> switch_marks(
    const analysis::HotSwitchAnalysis& hot) {
    std::vector<timeline::TimelineCanvas::SwitchMark> marks;
    for (const analysis::HotSwitchSpan& span : hot.spans) {
        marks.push_back(
            {span.start_ns, span.end_ns,
             QObject::tr("hot switch %1 → %2 (step %3, %4): %5 sent by all ranks, at most %6 by "
                         "one, %7 between nodes%8")
                 .arg(QString::fromStdString(span.from), QString::fromStdString(span.to))
                 .arg(span.step)
                 .arg(timeline::format_duration(span.end_ns - span.start_ns))
                 .arg(bytes_text(span.bytes), bytes_text(span.largest_send_bytes),
                      bytes_text(span.inter_node_bytes),
                      span.gradients ? QObject::tr("; gradient accumulators too") : QString())});
    }
    return marks;
}

}  // namespace

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
    model_ = new timeline::LaneTreeModel(this);
    canvas_ = new timeline::TimelineCanvas(this);
    scroll_ = new QScrollBar(Qt::Vertical, this);
    details_ = new QTextBrowser(this);
    details_->setMinimumWidth(220);
    details_->setPlaceholderText(tr("Click an event to see its details."));

    grouping_ = new QComboBox(this);
    for (Grouping g : {Grouping::pp, Grouping::dp, Grouping::cp, Grouping::tp, Grouping::none}) {
        grouping_->addItem(timeline::grouping_label(g), static_cast<int>(g));
    }
    search_ = new QLineEdit(this);
    search_->setPlaceholderText(tr("Search names"));
    search_->setClearButtonEnabled(true);
    auto* previous = new QToolButton(this);
    previous->setText(QStringLiteral("◀"));
    auto* next = new QToolButton(this);
    next->setText(QStringLiteral("▶"));
    hit_label_ = new QLabel(this);
    step_ = new QSpinBox(this);
    step_->setRange(-1, 1'000'000);
    step_->setSpecialValueText(tr("none"));
    step_->setValue(-1);
    microbatch_ = new QSpinBox(this);
    microbatch_->setRange(-1, 1'000'000);
    microbatch_->setSpecialValueText(tr("none"));
    microbatch_->setValue(-1);
    auto* whole = new QPushButton(tr("Whole run"), this);

    auto* bar = new QHBoxLayout;
    bar->addWidget(new QLabel(tr("Group by"), this));
    bar->addWidget(grouping_);
    bar->addSpacing(12);
    bar->addWidget(search_, 1);
    bar->addWidget(previous);
    bar->addWidget(next);
    bar->addWidget(hit_label_);
    bar->addSpacing(12);
    bar->addWidget(new QLabel(tr("Highlight step"), this));
    bar->addWidget(step_);
    bar->addWidget(new QLabel(tr("micro-batch"), this));
    bar->addWidget(microbatch_);
    bar->addWidget(whole);

    auto* canvas_box = new QWidget(this);
    auto* canvas_layout = new QHBoxLayout(canvas_box);
    canvas_layout->setContentsMargins(0, 0, 0, 0);
    canvas_layout->setSpacing(0);
    canvas_layout->addWidget(canvas_, 1);
    canvas_layout->addWidget(scroll_);
    auto* splitter = new QSplitter(Qt::Horizontal, this);
    splitter->addWidget(canvas_box);
    splitter->addWidget(details_);
    splitter->setStretchFactor(0, 4);
    splitter->setStretchFactor(1, 1);

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(2, 2, 2, 2);
    layout->addLayout(bar);
    layout->addWidget(splitter, 1);

    connect(grouping_, &QComboBox::currentIndexChanged, this,
            [this](int) { set_grouping(static_cast<Grouping>(grouping_->currentData().toInt())); });
    connect(search_, &QLineEdit::returnPressed, this, [this] {
        if (!hits_.empty() && hit_ >= 0 && search_->isModified() == false) {
            next_hit();
        } else {
            search(search_->text());
            search_->setModified(false);
        }
    });
    connect(previous, &QToolButton::clicked, this, &TimelineView::previous_hit);
    connect(next, &QToolButton::clicked, this, &TimelineView::next_hit);
    connect(step_, &QSpinBox::valueChanged, this, &TimelineView::highlight_step);
    connect(microbatch_, &QSpinBox::valueChanged, this, &TimelineView::highlight_microbatch);
    connect(whole, &QPushButton::clicked, canvas_, &timeline::TimelineCanvas::show_all);
    connect(scroll_, &QScrollBar::valueChanged, canvas_, &timeline::TimelineCanvas::set_scroll);
    connect(canvas_, &timeline::TimelineCanvas::scroll_changed, scroll_, &QScrollBar::setValue);
    connect(canvas_, &timeline::TimelineCanvas::scroll_range_changed, this,
            [this](int maximum, int page) {
                scroll_->setRange(0, maximum);
                scroll_->setPageStep(std::max(1, page));
                scroll_->setSingleStep(timeline::TimelineCanvas::kDepthHeight);
            });
    connect(canvas_, &timeline::TimelineCanvas::selection_changed, this,
            &TimelineView::show_details);
    connect(canvas_, &timeline::TimelineCanvas::status_message, this,
            &TimelineView::status_message);
    // A paged run's new detail renumbers events: the hits are found again in it, and the one
    // shown by value (the canvas found it again, when it is still loaded).
    connect(canvas_, &timeline::TimelineCanvas::detail_changed, this, [this] {
        if (hits_.empty()) {
            return;
        }
        hits_ = timeline::find_by_name(*canvas_->trace(), *canvas_->layout(),
                                       search_->text().toStdString());
        const auto shown = canvas_->search_hit();
        const auto it = shown ? std::find(hits_.begin(), hits_.end(), *shown) : hits_.end();
        hit_ = it != hits_.end() ? static_cast<int>(it - hits_.begin()) : -1;
        hit_label_->setText(
            hits_.empty() ? tr("no hits")
                          : QStringLiteral("%1 / %2")
                                .arg(hit_ >= 0 ? QString::number(hit_ + 1) : QStringLiteral("–"))
                                .arg(hits_.size()));
    });
}

TimelineView::~TimelineView() {
    // The canvas and the model point into the layout and the trace; detach before they go.
    canvas_->set_data(nullptr, nullptr, nullptr);
}

void TimelineView::set_run(RunPtr run) {
    canvas_->set_data(nullptr, nullptr, nullptr);
    canvas_->set_critical_passes({});
    canvas_->set_switch_marks({});
    model_->set_run(nullptr, nullptr);
    hits_.clear();
    hit_ = -1;
    hit_label_->clear();
    run_ = std::move(run);
    layout_.reset();
    paged_.reset();
    if (run_ == nullptr || run_->trace == nullptr) {
        show_details();
        return;
    }
    if (run_->paged()) {
        auto paged =
            timeline::PagedTimeline::open(run_->path.toStdString(), *run_->trace, run_->summaries);
        if (!paged) {
            emit status_message(
                tr("Cannot page the timeline of %1: %2")
                    .arg(run_->path, QString::fromStdString(paged.error().message)));
            show_details();
            return;
        }
        paged_ = std::move(*paged);
        connect(paged_.get(), &timeline::PagedTimeline::detail_failed, this,
                [this](const QString& message) {
                    emit status_message(tr("Cannot read events: %1").arg(message));
                });
        model_->set_run(run_->trace.get(), &paged_->skeleton_layout());
        canvas_->set_data(run_->trace.get(), &paged_->skeleton_layout(), model_);
        canvas_->set_paged(paged_.get());
    } else {
        layout_ = std::make_unique<timeline::Layout>(timeline::build_layout(*run_->trace));
        model_->set_run(run_->trace.get(), layout_.get());
        canvas_->set_data(run_->trace.get(), layout_.get(), model_);
    }
    canvas_->set_highlight(step_->value(), microbatch_->value());
    canvas_->set_critical_passes(run_->analysis ? critical_pass_keys(*run_->analysis)
                                                : std::set<PassKey>{});
    canvas_->set_switch_marks(run_->analysis ? switch_marks(run_->analysis->hot_switch)
                                             : std::vector<timeline::TimelineCanvas::SwitchMark>{});
    show_details();
}

void TimelineView::set_grouping(Grouping grouping) {
    const int index = grouping_->findData(static_cast<int>(grouping));
    if (index >= 0 && index != grouping_->currentIndex()) {
        grouping_->setCurrentIndex(index);  // comes back here through the signal
        return;
    }
    model_->set_grouping(grouping);
}

void TimelineView::show_place(const Place& place) {
    highlight_step(place.step);
    highlight_microbatch(place.microbatch);
    const timeline::Layout* shown = layout();
    if (shown == nullptr) {
        return;
    }
    std::int64_t start = std::numeric_limits<std::int64_t>::max();
    std::int64_t end = std::numeric_limits<std::int64_t>::min();
    int first_row = -1;
    for (std::uint32_t r = 0; r < shown->rows.size(); ++r) {
        if (place.rank >= 0 && shown->rows[r].rank != place.rank) {
            continue;
        }
        if (first_row < 0) {
            first_row = static_cast<int>(r);
        }
        for (const timeline::WorkSpan& span : shown->spans[r]) {
            if ((place.step >= 0 && span.step != place.step) ||
                (place.microbatch >= 0 && span.microbatch != place.microbatch)) {
                continue;
            }
            start = std::min(start, span.start_ns);
            end = std::max(end, span.end_ns);
        }
    }
    if (place.rank >= 0) {
        model_->reveal_rank(place.rank);
        if (first_row >= 0) {
            canvas_->scroll_to_row(static_cast<std::uint32_t>(first_row));
        }
    }
    if (end > start && (place.step >= 0 || place.microbatch >= 0)) {
        const std::int64_t margin = std::max<std::int64_t>((end - start) / 20, 1);
        zoom_to(start - margin, end + margin);
    }
}

void TimelineView::highlight_step(int step) {
    if (step_->value() != step) {
        const QSignalBlocker block(step_);
        step_->setValue(step);
    }
    canvas_->set_highlight(step_->value(), microbatch_->value());
}

void TimelineView::highlight_microbatch(int microbatch) {
    if (microbatch_->value() != microbatch) {
        const QSignalBlocker block(microbatch_);
        microbatch_->setValue(microbatch);
    }
    canvas_->set_highlight(step_->value(), microbatch_->value());
}

void TimelineView::zoom_to(std::int64_t start_ns, std::int64_t end_ns) {
    canvas_->set_window(start_ns, end_ns);
}

void TimelineView::select_event(std::optional<EventRef> ref) {
    canvas_->select(ref);
}

int TimelineView::search(const QString& text) {
    hits_.clear();
    hit_ = -1;
    // A paged run searches the events loaded now (the visible window's).
    if (layout() != nullptr && !text.isEmpty()) {
        hits_ = timeline::find_by_name(*canvas_->trace(), *layout(), text.toStdString());
    }
    if (hits_.empty()) {
        canvas_->set_search_hit(std::nullopt);
        hit_label_->setText(text.isEmpty() ? QString() : tr("no hits"));
        return 0;
    }
    show_hit(0);
    return static_cast<int>(hits_.size());
}

void TimelineView::next_hit() {
    if (!hits_.empty()) {
        show_hit((hit_ + 1) % static_cast<int>(hits_.size()));
    }
}

void TimelineView::previous_hit() {
    if (!hits_.empty()) {
        const int n = static_cast<int>(hits_.size());
        show_hit((hit_ - 1 + n) % n);
    }
}

void TimelineView::show_hit(int index) {
    hit_ = index;
    const EventRef ref = hits_[index];
    const timeline::LaneRow& row = layout()->rows[ref.row];
    const Event& event = row.lane->events[ref.event];
    model_->reveal_rank(row.rank);
    canvas_->scroll_to_row(ref.row);
    // The hit with its neighbourhood: a few times its own length, at least a microsecond.
    const std::int64_t margin = std::max<std::int64_t>(event.duration_ns() * 2, 1000);
    zoom_to(event.start_ns - margin, event.end_ns + margin);
    canvas_->set_search_hit(ref);
    canvas_->select(ref);
    hit_label_->setText(QStringLiteral("%1 / %2").arg(index + 1).arg(hits_.size()));
}

void TimelineView::show_details() {
    const auto ref = canvas_->selected();
    if (!ref || layout() == nullptr || ref->row >= layout()->rows.size() ||
        ref->event >= layout()->rows[ref->row].lane->events.size()) {
        details_->clear();
        return;
    }
    const analysis::RunTrace& trace = *canvas_->trace();
    const timeline::LaneRow& row = layout()->rows[ref->row];
    const Event& event = row.lane->events[ref->event];
    QString html = QStringLiteral("<h3>%1</h3><table cellspacing=2>")
                       .arg(text_of(trace.name(event.name)).toHtmlEscaped());
    auto add = [&](const QString& label, const QString& value) {
        html += QStringLiteral("<tr><td><b>%1</b></td><td>%2</td></tr>")
                    .arg(label, value.toHtmlEscaped());
    };
    add(tr("Duration"), timeline::format_duration(event.duration_ns()));
    add(tr("Start"), timeline::format_duration(event.start_ns));
    add(tr("End"), timeline::format_duration(event.end_ns));
    add(tr("Kind"), text_of(to_string(event.kind)));
    add(tr("Category"), text_of(to_string(event.category)));
    add(tr("Rank"), QString::number(row.rank));
    add(tr("Lane"), QStringLiteral("%1 (%2)").arg(QString::fromStdString(row.lane->info.name),
                                                  text_of(to_string(row.lane->info.kind))));
    add(tr("Step"), optional_number(event.step));
    add(tr("Micro-batch"), optional_number(event.microbatch));
    add(tr("Stage"), optional_number(event.stage));
    add(tr("Phase"), optional_text(to_string(event.phase)));
    const Phase kind = pass_kind(trace, event);
    if (kind != Phase::none) {
        const std::int32_t chunk = chunk_of_args(trace.name(event.args));
        add(tr("Pass"), pass_label(kind, event.microbatch, chunk));
        add(tr("Virtual stage"), optional_number(chunk));
        add(tr("Critical path"),
            canvas_->critical_passes().count({row.rank, event.step, event.microbatch, kind}) > 0
                ? tr("yes: this pass set the step's length")
                : tr("no"));
    }
    // The thread CPU a pass or the optimizer step used (fulcrum-train's `fulcrum.cpu` mark
    // after it): less than its wall time where its rank waited for a core.
    const bool cpu_mark = event.kind == EventKind::mark && trace.name(event.name) == kCpuMark;
    const bool cpu_marked = kind != Phase::none || trace.role(event) == analysis::Role::optimizer;
    if (cpu_marked && event.duration_ns() > 0) {
        const std::int64_t cpu = analysis::CpuMarks(trace, *row.lane).after(event.end_ns);
        if (cpu >= 0) {
            add(tr("Thread CPU"), tr("%1 (%2% of its wall time)")
                                      .arg(timeline::format_duration(cpu))
                                      .arg(100.0 * static_cast<double>(cpu) /
                                               static_cast<double>(event.duration_ns()),
                                           0, 'f', 0));
        }
    }
    if (cpu_mark) {
        add(tr("Thread CPU"), timeline::format_duration(event.bytes));
    } else {
        add(tr("Bytes"), optional_number(event.bytes));
    }
    add(tr("Copy kind"), optional_text(to_string(event.copy_kind)));
    add(tr("Correlation"), optional_number(event.correlation));
    html += QStringLiteral("</table>");
    if (event.args.valid()) {
        html += QStringLiteral("<p><b>%1</b></p><pre>%2</pre>")
                    .arg(tr("Args"), text_of(trace.name(event.args)).toHtmlEscaped());
    }
    details_->setHtml(html);
}

}  // namespace fulcrum::views
