#include "collectors/inject/tsc_clock.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

namespace fulcrum::collect {
namespace {

constexpr std::int64_t kCalibrationNs = 10'000'000;
// A larger difference from CLOCK_REALTIME is a step of the wall clock (or a counter that
// misbehaves), not drift: the line jumps to CLOCK_REALTIME instead of slewing.
constexpr std::int64_t kStepNs = 1'000'000;
constexpr double kSlewWindowNs = 1e9;

std::uint64_t raw_ticks() {
#if defined(__x86_64__)
    return __builtin_ia32_rdtsc();
#else
    return 0;
#endif
}

std::uint64_t fixed_point(double ns_per_tick) {
    return static_cast<std::uint64_t>(std::llround(ns_per_tick * 4294967296.0));
}

TscClock::Source source_from_environment() {
    const char* chosen = std::getenv("FULCRUM_CLOCK");
    if (chosen != nullptr && std::strcmp(chosen, "realtime") == 0) {
        return TscClock::Source::realtime;
    }
#if defined(__x86_64__)
    if (chosen != nullptr && std::strcmp(chosen, "tsc") == 0) {
        return TscClock::Source::tsc;
    }
    return TscClock::tsc_is_invariant() ? TscClock::Source::tsc : TscClock::Source::realtime;
#else
    return TscClock::Source::realtime;
#endif
}

}  // namespace

TscClock* const TscClock::instance_ = new TscClock(source_from_environment());

bool TscClock::tsc_is_invariant() {
#if defined(__x86_64__)
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(0x80000000, &eax, &ebx, &ecx, &edx) && eax >= 0x80000007 &&
        __get_cpuid(0x80000007, &eax, &ebx, &ecx, &edx) && (edx & (1u << 8)) != 0) {
        return true;
    }
    // Hypervisors may hide the CPUID leaf while the kernel, which knows the host, still
    // reports both halves of invariance.
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    while (std::getline(cpuinfo, line)) {
        if (line.starts_with("flags")) {
            line += ' ';
            return line.find(" constant_tsc ") != std::string::npos &&
                   line.find(" nonstop_tsc ") != std::string::npos;
        }
    }
#endif
    return false;
}

TscClock::TscClock(Source source) : source_(source) {
    if (source_ == Source::realtime) {
        calibrated_ = true;
        ns_per_tick_ = 1.0;
        return;
    }
    first_ = sample();
}

TscClock::Sample TscClock::sample() const {
    Sample best;
    std::uint64_t best_width = std::numeric_limits<std::uint64_t>::max();
    for (int attempt = 0; attempt < 5; ++attempt) {
        const std::uint64_t before = raw_ticks();
        const std::int64_t realtime = realtime_ns();
        const std::int64_t monotonic = monotonic_ns();
        const std::uint64_t after = raw_ticks();
        if (after >= before && after - before < best_width) {
            best_width = after - before;
            best = {before + (after - before) / 2, realtime, monotonic};
        }
    }
    return best;
}

void TscClock::push_segment_locked(const Segment& segment) {
    newest_ = (newest_ + 1) % kSegments;
    segments_[newest_] = segment;
    count_ = std::min(count_ + 1, kSegments);
}

void TscClock::calibrate_locked() {
    if (calibrated_) {
        return;
    }
    const std::int64_t elapsed = monotonic_ns() - first_.monotonic;
    if (elapsed < kCalibrationNs) {
        const std::int64_t left = kCalibrationNs - elapsed;
        timespec pause{static_cast<time_t>(left / 1'000'000'000),
                       static_cast<long>(left % 1'000'000'000)};
        while (nanosleep(&pause, &pause) != 0) {
        }
    }
    const Sample now = sample();
    ns_per_tick_ = static_cast<double>(now.monotonic - first_.monotonic) /
                   static_cast<double>(now.ticks - first_.ticks);
    push_segment_locked({now.ticks, now.realtime, fixed_point(ns_per_tick_)});
    calibrated_ = true;
}

std::int64_t TscClock::reanchor() {
    std::lock_guard lock(mutex_);
    if (source_ == Source::realtime) {
        return 0;
    }
    calibrate_locked();
    const Sample now = sample();
    const std::int64_t on_line = Conversion::apply(segments_[newest_], now.ticks);
    const std::int64_t difference = on_line - now.realtime;
    // The rate over the whole run so far: the longer the run, the better it is known.
    ns_per_tick_ = static_cast<double>(now.monotonic - first_.monotonic) /
                   static_cast<double>(now.ticks - first_.ticks);
    if (std::llabs(difference) > kStepNs) {
        push_segment_locked({now.ticks, now.realtime, fixed_point(ns_per_tick_)});
        return difference;
    }
    // Continuous at `now`, and back on CLOCK_REALTIME one second later.
    const double slewed = ns_per_tick_ * (1.0 - static_cast<double>(difference) / kSlewWindowNs);
    push_segment_locked({now.ticks, on_line, fixed_point(slewed)});
    return difference;
}

double TscClock::ticks_per_second() {
    std::lock_guard lock(mutex_);
    calibrate_locked();
    return 1e9 / ns_per_tick_;
}

TscClock::Conversion TscClock::conversion() {
    Conversion conversion;
    if (source_ == Source::realtime) {
        conversion.identity_ = true;
        return conversion;
    }
    std::lock_guard lock(mutex_);
    calibrate_locked();
    conversion.count_ = count_;
    for (int i = 0; i < count_; ++i) {
        conversion.segments_[i] = segments_[(newest_ - count_ + 1 + i + kSegments) % kSegments];
    }
    return conversion;
}

std::int64_t TscClock::to_ns(std::uint64_t ticks) {
    if (source_ == Source::realtime) {
        return static_cast<std::int64_t>(ticks);
    }
    std::lock_guard lock(mutex_);
    calibrate_locked();
    // The newest segment that began at or before `ticks`; the oldest for older ticks.
    for (int i = 0; i < count_; ++i) {
        const Segment& segment = segments_[(newest_ - i + kSegments) % kSegments];
        if (segment.base_ticks <= ticks || i == count_ - 1) {
            return Conversion::apply(segment, ticks);
        }
    }
    return 0;
}

std::int64_t TscClock::Conversion::apply(const Segment& segment, std::uint64_t ticks) {
    using Wide = unsigned __int128;
    if (ticks >= segment.base_ticks) {
        return segment.base_ns +
               static_cast<std::int64_t>((Wide(ticks - segment.base_ticks) * segment.mult) >> 32);
    }
    return segment.base_ns -
           static_cast<std::int64_t>((Wide(segment.base_ticks - ticks) * segment.mult) >> 32);
}

std::int64_t TscClock::Conversion::operator()(std::uint64_t ticks) const {
    if (identity_) {
        return static_cast<std::int64_t>(ticks);
    }
    for (int i = count_ - 1; i >= 0; --i) {
        if (segments_[i].base_ticks <= ticks || i == 0) {
            return apply(segments_[i], ticks);
        }
    }
    return 0;
}

}  // namespace fulcrum::collect
