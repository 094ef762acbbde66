// fulcrum-ui: the desktop GUI. `fulcrum-ui [RUN...]` opens runs in the window;
// `fulcrum-ui --screenshot FILE.png [--view V] [--size WxH] RUN...` renders one view to a PNG
// and exits (tests, docs, bug reports), without a display.
#include <QApplication>
#include <QCommandLineParser>
#include <QFileInfo>
#include <QPixmap>
#include <QRegularExpression>
#include <QTimer>
#include <cstdio>

#include "app/ui/main_window.h"

namespace {

constexpr int kExitUsage = 2;

bool has_display() {
    return !qEnvironmentVariableIsEmpty("DISPLAY") ||
           !qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY") ||
           !qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM");
}

int fail(const QString& message) {
    std::fprintf(stderr, "fulcrum-ui: %s\n", qPrintable(message));
    return kExitUsage;
}

struct ScreenshotRequest {
    QString file;
    fulcrum::ui::View view = fulcrum::ui::View::timeline;
    QSize size{1600, 1000};
    QString plan;  // --plan: a `fulcrum plan --json` file for the Plan tab
};

// Opens the runs, waits until they are loaded, renders the view and writes the PNG.
int take_screenshot(const ScreenshotRequest& request, const QStringList& runs) {
    using fulcrum::ui::MainWindow;
    MainWindow window;
    window.set_modal_dialogs(false);
    QStringList errors;
    QObject::connect(&window, &MainWindow::error_reported,
                     [&errors](const QString& message) { errors << message; });
    window.resize(request.size);
    window.show();
    window.show_view(request.view);
    if (!request.plan.isEmpty()) {
        window.open_plan(request.plan);
    }

    auto render = [&] {
        if (!errors.isEmpty()) {
            for (const QString& error : errors) {
                fail(error);
            }
            QCoreApplication::exit(kExitUsage);
            return;
        }
        window.show_view(request.view);
        // Let the views lay out and replot before the grab.
        QTimer::singleShot(300, &window, [&] {
            QPixmap pixmap = window.grab();
            if (pixmap.size() != request.size) {
                pixmap =
                    pixmap.scaled(request.size, Qt::IgnoreAspectRatio, Qt::SmoothTransformation);
            }
            if (!pixmap.save(request.file, "PNG")) {
                fail(QString("cannot write '%1'").arg(request.file));
                QCoreApplication::exit(kExitUsage);
                return;
            }
            QCoreApplication::exit(0);
        });
    };
    QObject::connect(&window, &MainWindow::loading_idle, &window, render);
    if (runs.isEmpty()) {
        QTimer::singleShot(0, &window, render);
    }
    for (const QString& run : runs) {
        window.open_path(run);
    }
    return QApplication::exec();
}

}  // namespace

int main(int argc, char** argv) {
    QCoreApplication::setOrganizationName(QStringLiteral("Fulcrum"));
    QCoreApplication::setApplicationName(QStringLiteral("fulcrum-ui"));
    QCoreApplication::setApplicationVersion(QString::fromLatin1(FULCRUM_VERSION));

    QStringList arguments;
    for (int i = 0; i < argc; ++i) {
        arguments << QString::fromLocal8Bit(argv[i]);
    }
    QCommandLineParser parser;
    parser.setApplicationDescription(
        "Fulcrum: a profiler and visualizer for 4D-parallel (DP x TP x PP x CP) LLM training.\n"
        "Opens run files (*.fulcrum) and capture folders.");
    const QCommandLineOption help_option({"h", "help"}, "Show this help and exit.");
    const QCommandLineOption version_option("version", "Show the version and exit.");
    const QCommandLineOption screenshot_option(
        "screenshot", "Render a view of the window to FILE (PNG) and exit; needs no display.",
        "FILE");
    const QCommandLineOption view_option(
        "view",
        "The view to show first, or to render with --screenshot: " +
            fulcrum::ui::view_keys().join(", ") + ".",
        "VIEW", "timeline");
    const QCommandLineOption size_option("size", "Window size for --screenshot.", "WxH",
                                         "1600x1000");
    const QCommandLineOption plan_option(
        "plan", "Open what `fulcrum plan --json` wrote into the Plan tab.", "FILE.json");
    parser.addOptions(
        {help_option, version_option, screenshot_option, view_option, size_option, plan_option});
    parser.addPositionalArgument("RUN", "Run files or capture folders to open.", "[RUN...]");
    if (!parser.parse(arguments)) {
        return fail(parser.errorText() + " (see --help)");
    }
    if (parser.isSet(help_option)) {
        std::fputs(qPrintable(parser.helpText()), stdout);
        return 0;
    }
    if (parser.isSet(version_option)) {
        std::printf("fulcrum-ui %s\n", FULCRUM_VERSION);
        return 0;
    }

    const bool screenshot = parser.isSet(screenshot_option);
    ScreenshotRequest request;
    if (screenshot) {
        request.file = parser.value(screenshot_option);
        request.plan = parser.value(plan_option);
        const auto view = fulcrum::ui::view_from_key(parser.value(view_option));
        if (!view) {
            return fail(QString("unknown view '%1'; choose one of %2")
                            .arg(parser.value(view_option), fulcrum::ui::view_keys().join(", ")));
        }
        request.view = *view;
        static const QRegularExpression size_pattern(R"(^(\d{2,5})[xX](\d{2,5})$)");
        const auto size = size_pattern.match(parser.value(size_option));
        if (!size.hasMatch()) {
            return fail(QString("bad --size '%1'; expected WIDTHxHEIGHT, e.g. 1600x1000")
                            .arg(parser.value(size_option)));
        }
        request.size = QSize(size.captured(1).toInt(), size.captured(2).toInt());
        if (!has_display()) {
            qputenv("QT_QPA_PLATFORM", "offscreen");
        }
    } else if (parser.isSet(size_option)) {
        return fail("--size goes with --screenshot");
    } else if (!has_display()) {
        return fail(
            "no display (neither DISPLAY nor WAYLAND_DISPLAY is set). Run it in a desktop "
            "session or with `ssh -X`, use xvfb-run, or render a view without a display: "
            "fulcrum-ui --screenshot FILE.png [--view VIEW] RUN...");
    }

    QApplication app(argc, argv);
    const QStringList runs = parser.positionalArguments();
    if (screenshot) {
        return take_screenshot(request, runs);
    }
    const auto start_view = fulcrum::ui::view_from_key(parser.value(view_option));
    if (!start_view) {
        return fail(QString("unknown view '%1'; choose one of %2")
                        .arg(parser.value(view_option), fulcrum::ui::view_keys().join(", ")));
    }
    fulcrum::ui::MainWindow window;
    window.show();
    window.show_view(*start_view);
    if (parser.isSet(plan_option)) {
        window.open_plan(parser.value(plan_option));
    }
    for (const QString& run : runs) {
        window.open_path(run);
    }
    return QApplication::exec();
}
