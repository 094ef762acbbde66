#include "views/common/pass_marks.h"

namespace fulcrum::views {

std::set<PassKey> critical_pass_keys(const analysis::RunAnalysis& analysis) {
    std::set<PassKey> keys;
    for (const analysis::CriticalPath& path : analysis.critical_paths) {
        for (const analysis::CriticalSegment& segment : path.segments) {
            if (segment.is_pass()) {
                keys.insert({segment.rank, segment.step, segment.microbatch, segment.phase});
            }
        }
    }
    return keys;
}

Phase pass_kind(const analysis::RunTrace& trace, const Event& event) {
    switch (trace.role(event)) {
        case analysis::Role::forward:
            return Phase::forward;
        case analysis::Role::backward:
            return event.phase == Phase::weight_grad ? Phase::weight_grad : Phase::backward;
        default:
            return Phase::none;
    }
}

QString pass_label(Phase kind, std::int32_t microbatch, std::int32_t chunk) {
    QString label = kind == Phase::forward    ? QStringLiteral("F")
                    : kind == Phase::backward ? QStringLiteral("B")
                                              : QStringLiteral("W");
    if (microbatch >= 0) {
        label += QString::number(microbatch);
    }
    return chunk >= 0 ? QStringLiteral("%1 v%2").arg(label).arg(chunk) : label;
}

}  // namespace fulcrum::views
