// The collector's clock: host ranges, marks and (through CUPTI's timestamp callback) GPU
// records all take their time from here, on the CLOCK_REALTIME timeline (UTC ns), so that a
// rank's file needs no offset to UTC and GPU and host events line up.
//
// Reading CLOCK_REALTIME costs tens of ns on some virtual machines, and a push/pop pair reads
// the clock twice. Where the CPU's time-stamp counter is invariant (it ticks at one rate in
// every power state and on every core: docs/sources.md, "Time-stamp counter") the hot path
// reads the counter with `rdtsc` and keeps the raw ticks; they become nanoseconds when the
// housekeeper drains the buffers. Tracy times its zones the same way.
//
// Conversion: ns = base_ns + (ticks - base_ticks) * mult >> 32, one line per segment. The
// rate comes from CLOCK_MONOTONIC (never stepped) over a 10 ms calibration, refined as the run
// goes on; every second `reanchor` compares the line with CLOCK_REALTIME and starts a new
// segment, continuous with the last, whose slope takes the difference back within the
// next second. Ticks are converted with the segment they were read in, so the mapping is
// monotonic even for events converted after a re-anchor. A difference over 1 ms (the wall
// clock was stepped, or the counter misbehaves) re-anchors hard, onto CLOCK_REALTIME.
//
// Fallback: without an invariant counter (or with FULCRUM_CLOCK=realtime) the "ticks" are
// CLOCK_REALTIME nanoseconds and conversion is the identity.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace fulcrum::collect {

class TscClock {
public:
    enum class Source : std::uint8_t { tsc, realtime };

    // The process's clock, made as the library loads (its calibration window starts then);
    // its source: FULCRUM_CLOCK=realtime or tsc, else the counter where it is invariant.
    static TscClock& instance() { return *instance_; }

    // For tests: a clock with the given source, anchored now.
    explicit TscClock(Source source);

    Source source() const { return source_; }

    // The hot path: raw ticks (or CLOCK_REALTIME ns in the fallback).
    std::uint64_t ticks() const {
#if defined(__x86_64__)
        if (source_ == Source::tsc) [[likely]] {
            return __builtin_ia32_rdtsc();
        }
#endif
        return static_cast<std::uint64_t>(realtime_ns());
    }

    // Segments of the line, copied once for converting many ticks (a drained block).
    class Conversion;
    Conversion conversion();
    // Ticks read by `ticks()` to CLOCK_REALTIME ns. Both wait for the end of the first
    // calibration (at most 10 ms after the clock was made) when it has not ended yet.
    std::int64_t to_ns(std::uint64_t ticks);
    std::int64_t now_ns() {
        return to_ns(ticks());
    }

    // Compares the line with CLOCK_REALTIME and starts a new segment; from the housekeeper,
    // about once a second. Returns the difference found (line - CLOCK_REALTIME, ns).
    std::int64_t reanchor();

    // Ticks per second as calibrated (1e9 in the fallback).
    double ticks_per_second();

    static std::int64_t realtime_ns() {
        timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
    }
    static std::int64_t monotonic_ns() {
        timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
    }
    // True when the CPU says its counter is invariant (CPUID, or the kernel's flags).
    static bool tsc_is_invariant();

    struct Segment {
        std::uint64_t base_ticks = 0;
        std::int64_t base_ns = 0;
        std::uint64_t mult = 0;  // ns per tick, times 2^32
    };
    static constexpr int kSegments = 16;  // 16 s of history at one re-anchor a second

    class Conversion {
    public:
        std::int64_t operator()(std::uint64_t ticks) const;
        static std::int64_t apply(const Segment& segment, std::uint64_t ticks);

    private:
        friend class TscClock;
        bool identity_ = false;
        int count_ = 0;
        Segment segments_[kSegments];  // oldest first
    };

private:
    // A counter reading with CLOCK_REALTIME and CLOCK_MONOTONIC taken between two counter
    // reads; the tightest of a few tries, so that a preemption does not skew the pair.
    struct Sample {
        std::uint64_t ticks = 0;
        std::int64_t realtime = 0;
        std::int64_t monotonic = 0;
    };
    Sample sample() const;
    void calibrate_locked();  // with mutex_ held
    void push_segment_locked(const Segment& segment);

    static TscClock* const instance_;  // never destroyed: threads may read it while exiting
    Source source_;
    std::mutex mutex_;
    Sample first_;            // the start of the long-term rate
    double ns_per_tick_ = 0;  // from CLOCK_MONOTONIC, since first_
    bool calibrated_ = false;
    int newest_ = -1;  // in the ring below
    int count_ = 0;
    Segment segments_[kSegments];
};

// One clock for host ranges and GPU records, on the CLOCK_REALTIME timeline (tsc_clock.h);
// also registered as CUPTI's timestamp callback. Its offset to UTC is therefore 0.
inline std::int64_t host_clock_ns() {
    return TscClock::instance().now_ns();
}

}  // namespace fulcrum::collect
