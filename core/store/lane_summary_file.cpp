#include "core/store/lane_summary_file.h"

#include <vector>

#include "core/store/lane_summary.h"
#include "core/store/sqlite_handle.h"
#include "core/store/trace_reader.h"

namespace fulcrum::store {

Status build_lane_summaries(const std::string& path, const std::function<void(double)>& progress) {
    auto reader = TraceReader::open(path);
    if (!reader) {
        return reader.error();
    }
    std::vector<LaneSummary> summaries;
    summaries.reserve(reader->lanes().size());
    for (std::size_t i = 0; i < reader->lanes().size(); ++i) {
        LaneSummaryBuilder builder(reader->lanes()[i].id);
        auto status = reader->for_each_event(reader->lanes()[i].id, [&](const Event& event) {
            builder.add(event);
            return true;
        });
        if (!status) {
            return status;
        }
        summaries.push_back(std::move(builder).finish());
        if (progress) {
            progress(static_cast<double>(i + 1) / static_cast<double>(reader->lanes().size()));
        }
    }
    auto db = Database::open(path, Database::Mode::read_write);
    if (!db) {
        return db.error();
    }
    if (auto begun = db->exec("BEGIN IMMEDIATE"); !begun) {
        return begun;
    }
    if (auto written = write_lane_summaries(*db, summaries); !written) {
        (void)db->exec("ROLLBACK");
        return written;
    }
    return db->exec("COMMIT");
}

}  // namespace fulcrum::store
