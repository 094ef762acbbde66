// The collector's clock (collectors/inject/tsc_clock.h) against the system's: a run of a few
// hundred ms, reading the counter and CLOCK_REALTIME side by side, re-anchoring as the
// housekeeper does (more often, to cross many segments), and converting both at once and
// later, as drained buffers are. The bound (50 us) is the accuracy the collector promises
// GPU/host alignment within a rank, not a speed.
#include <QTest>

#include <chrono>
#include <thread>
#include <vector>

#include "collectors/inject/tsc_clock.h"

using fulcrum::collect::TscClock;

namespace {

constexpr std::int64_t kBoundNs = 50'000;

struct Reading {
    std::int64_t realtime_before;
    std::uint64_t ticks;
    std::int64_t realtime_after;
};

Reading read_side_by_side(TscClock& clock) {
    Reading reading;
    reading.realtime_before = TscClock::realtime_ns();
    reading.ticks = clock.ticks();
    reading.realtime_after = TscClock::realtime_ns();
    return reading;
}

}  // namespace

class CollectClockTest : public QObject {
    Q_OBJECT

    // Readings over ~300 ms with a re-anchor every 20 ms; each converted at once and again at
    // the end (after up to 15 later segments), as a buffer drained late would be.
    void check_clock(TscClock& clock) {
        std::vector<Reading> readings;
        std::vector<std::int64_t> converted_at_once;
        const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
        int round = 0;
        while (std::chrono::steady_clock::now() < end) {
            const Reading reading = read_side_by_side(clock);
            readings.push_back(reading);
            converted_at_once.push_back(clock.to_ns(reading.ticks));
            if (++round % 20 == 0) {
                clock.reanchor();
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        QVERIFY(readings.size() > 20);
        const TscClock::Conversion later = clock.conversion();
        std::int64_t previous = 0;
        for (std::size_t i = 0; i < readings.size(); ++i) {
            const Reading& reading = readings[i];
            const std::int64_t ns = later(reading.ticks);
            QVERIFY2(
                ns >= reading.realtime_before - kBoundNs && ns <= reading.realtime_after + kBoundNs,
                qPrintable(QString("reading %1: %2 ns outside [%3, %4] +- 50 us")
                               .arg(i)
                               .arg(ns)
                               .arg(reading.realtime_before)
                               .arg(reading.realtime_after)));
            QVERIFY2(std::llabs(ns - converted_at_once[i]) <= kBoundNs,
                     qPrintable(QString("reading %1 converted at once %2, later %3")
                                    .arg(i)
                                    .arg(converted_at_once[i])
                                    .arg(ns)));
            QVERIFY2(ns >= previous, qPrintable(QString("reading %1 goes back in time").arg(i)));
            previous = ns;
        }
    }

private slots:
    void counterStaysOnRealtime() {
        if (!TscClock::tsc_is_invariant()) {
            QSKIP(
                "this CPU's time-stamp counter is not invariant: the collector uses "
                "CLOCK_REALTIME here (checked by realtimeFallbackIsTheIdentity)");
        }
        TscClock clock(TscClock::Source::tsc);
        QCOMPARE(clock.source(), TscClock::Source::tsc);
        // A counter of at least 100 MHz; the calibration ran (10 ms) before answering.
        QVERIFY2(clock.ticks_per_second() > 1e8,
                 qPrintable(QString::number(clock.ticks_per_second())));
        check_clock(clock);
    }

    void realtimeFallbackIsTheIdentity() {
        TscClock clock(TscClock::Source::realtime);
        QCOMPARE(clock.source(), TscClock::Source::realtime);
        const Reading reading = read_side_by_side(clock);
        // The "ticks" are CLOCK_REALTIME nanoseconds.
        QVERIFY(static_cast<std::int64_t>(reading.ticks) >= reading.realtime_before);
        QVERIFY(static_cast<std::int64_t>(reading.ticks) <= reading.realtime_after);
        QCOMPARE(clock.to_ns(reading.ticks), static_cast<std::int64_t>(reading.ticks));
        QCOMPARE(clock.conversion()(reading.ticks), static_cast<std::int64_t>(reading.ticks));
        QCOMPARE(clock.reanchor(), std::int64_t(0));
        check_clock(clock);
    }

    // Ticks read before the first segment began (while calibrating) convert on its line,
    // extended backwards, still on CLOCK_REALTIME.
    void ticksBeforeCalibrationConvert() {
        if (!TscClock::tsc_is_invariant()) {
            QSKIP("no invariant counter here");
        }
        TscClock clock(TscClock::Source::tsc);
        const Reading early = read_side_by_side(clock);
        const std::int64_t ns = clock.to_ns(early.ticks);  // calibrates now (10 ms)
        QVERIFY(ns >= early.realtime_before - kBoundNs && ns <= early.realtime_after + kBoundNs);
    }
};

QTEST_GUILESS_MAIN(CollectClockTest)
#include "test_collect_clock.moc"
