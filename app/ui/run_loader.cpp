#include "app/ui/run_loader.h"

#include <QPointer>
#include <QtConcurrent/QtConcurrentRun>
#include <functional>
#include <utility>

namespace fulcrum::ui {

RunLoader::RunLoader(QObject* parent) : QObject(parent) {
    connect(&watcher_, &QFutureWatcherBase::finished, this, &RunLoader::finish);
}

RunLoader::~RunLoader() {
    queue_.clear();
    if (cancel_) {
        cancel_->store(true);
    }
    watcher_.waitForFinished();
}

void RunLoader::open(const OpenRequest& request) {
    queue_.enqueue(request);
    if (!busy()) {
        start_next();
    }
}

void RunLoader::cancel() {
    queue_.clear();
    if (cancel_) {
        cancel_->store(true);
    }
}

void RunLoader::start_next() {
    if (queue_.isEmpty()) {
        emit idle();
        return;
    }
    current_ = queue_.dequeue();
    emit progress(current_->path, tr("opening"), 0.0);
    run_in_background([](const QString& path, const views::OpenOptions& options) {
        return views::open_run(path, options);
    });
}

void RunLoader::start_analysis(const views::RunPtr& run) {
    analysing_ = run;
    OpenRequest request;
    request.path = run->path;
    current_ = request;
    run_in_background([run](const QString&, const views::OpenOptions& options) {
        return views::analyse_paged_run(run, options);
    });
}

void RunLoader::run_in_background(
    std::function<Result<views::RunPtr>(const QString&, const views::OpenOptions&)> task) {
    cancel_ = std::make_shared<std::atomic<bool>>(false);
    const QString path = current_->path;
    // The thread reports through queued calls on `self`: once the loader is gone they are
    // dropped, and the destructor waits for the thread anyway.
    QPointer<RunLoader> self(this);
    auto cancel = cancel_;
    auto work = [self, cancel, path, task = std::move(task)]() -> Result<views::RunPtr> {
        if (cancel->load()) {
            return Error{ErrorCode::cancelled, "cancelled"};
        }
        views::OpenOptions options;
        options.cancel = cancel.get();
        options.progress = [self, path](const QString& stage, double fraction) {
            QMetaObject::invokeMethod(
                self.data(),
                [self, path, stage, fraction] {
                    if (self) {
                        emit self->progress(path, stage, fraction);
                    }
                },
                Qt::QueuedConnection);
        };
        return task(path, options);
    };
    watcher_.setFuture(QtConcurrent::run(work));
}

void RunLoader::finish() {
    const OpenRequest request = *current_;
    const bool was_cancelled = cancel_->load();
    Result<views::RunPtr> result = watcher_.future().result();
    current_.reset();
    cancel_.reset();
    const views::RunPtr analysed_run = std::exchange(analysing_, nullptr);
    if (analysed_run != nullptr) {
        // A paged run's analyses: cancelled leaves the run open as it was.
        if (!was_cancelled && result) {
            emit analysed(analysed_run, *result);
        }
        start_next();
        return;
    }
    if (was_cancelled || (!result && result.error().code == ErrorCode::cancelled)) {
        emit cancelled(request.path);
    } else if (!result) {
        emit failed(request.path, QString::fromStdString(result.error().message));
    } else {
        emit opened(*result, request);
        if ((*result)->paged() && (*result)->analysis == nullptr) {
            start_analysis(*result);
            return;
        }
    }
    start_next();
}

}  // namespace fulcrum::ui
