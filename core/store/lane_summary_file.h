// Lane summaries for a file that has none (lane_summary.h has the format): read through
// TraceReader, written back into the same file. Apart from lane_summary.h, which the reader
// itself includes to read the table.
#pragma once

#include <functional>
#include <string>

#include "core/util/result.h"

namespace fulcrum::store {

// Gives a file without summaries (rank files, runs merged before summaries existed) its
// lane_summary table: every lane's events read once in store order (each event block decoded
// once) through TraceReader, then the table written in one transaction. `progress` gets the
// fraction of lanes done.
Status build_lane_summaries(const std::string& path,
                            const std::function<void(double)>& progress = {});

}  // namespace fulcrum::store
