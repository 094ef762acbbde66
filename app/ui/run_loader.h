// Opens runs off the GUI thread, one after another, and talks to the window only through
// signals (hotspot's parser model). The one entry point, `open`, takes a path: a run file,
// a capture folder, and later any format an importer sniffs.
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QQueue>
#include <atomic>
#include <functional>
#include <memory>

#include "core/util/result.h"
#include "views/common/opened_run.h"

namespace fulcrum::ui {

// What the window does with a run once it is open (a re-run opens in Compare against the
// run it came from).
struct OpenRequest {
    QString path;
    views::RunPtr reference;  // null: keep Compare's reference
    bool show_compare = false;
    bool as_reference = false;  // the opened run becomes Compare's reference (a baseline)
};

class RunLoader : public QObject {
    Q_OBJECT
public:
    explicit RunLoader(QObject* parent = nullptr);
    ~RunLoader() override;  // cancels and waits for the loading thread

    void open(const OpenRequest& request);
    // Cancels the run being loaded and drops the queued ones. A cancelled run never opens,
    // even when its loading thread had already finished.
    void cancel();
    bool busy() const { return current_.has_value(); }
    int pending() const { return int(queue_.size()) + (busy() ? 1 : 0); }

signals:
    void progress(const QString& path, const QString& stage, double fraction);
    void opened(const fulcrum::views::RunPtr& run, const fulcrum::ui::OpenRequest& request);
    // A paged run's analyses, read after it opened (views::analyse_paged_run): `analysed` is
    // `run` with them. Cancelling stops them; the run stays open without.
    void analysed(const fulcrum::views::RunPtr& run, const fulcrum::views::RunPtr& analysed);
    void failed(const QString& path, const QString& message);
    void cancelled(const QString& path);
    void idle();  // nothing loading, nothing queued

private:
    void start_next();
    void finish();
    // After a paged run opens: its analyses, as the loader's next work.
    void start_analysis(const views::RunPtr& run);
    // `task` for current_'s path on a pool thread, with progress and cancel; finish() after.
    void run_in_background(
        std::function<Result<views::RunPtr>(const QString&, const views::OpenOptions&)> task);

    QQueue<OpenRequest> queue_;
    std::optional<OpenRequest> current_;
    views::RunPtr analysing_;  // the paged run whose analyses are being read
    std::shared_ptr<std::atomic<bool>> cancel_;
    QFutureWatcher<Result<views::RunPtr>> watcher_;
};

}  // namespace fulcrum::ui
