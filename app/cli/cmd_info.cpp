// fulcrum info RUN: what a run holds, at a glance.
#include <cstdio>
#include <map>
#include <memory>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "core/store/trace_reader.h"
#include "core/util/text_table.h"

namespace fulcrum::cli {
namespace {

// An imported trace has no 4D coordinates (-1) and often no host name: "—", not a value.
std::string coordinate(std::int32_t value) {
    return value >= 0 ? std::to_string(value) : "—";
}
std::string steps_text(const std::vector<std::int32_t>& steps) {
    if (steps.empty()) {
        return "none recorded";
    }
    return std::to_string(steps.size()) + " (" + std::to_string(steps.front()) + ".." +
           std::to_string(steps.back()) + ")";
}

int run_info(const std::string& path) {
    auto trace = store::TraceReader::open(path);
    if (!trace) {
        return report_error(trace.error());
    }
    auto summary = trace->summary();
    if (!summary) {
        return report_error(summary.error());
    }
    const RunInfo& run = trace->run();
    std::string out;
    out += "run      " + run.name + " (" + std::string(to_string(run.origin)) + ", schema " +
           std::to_string(trace->schema_version()) +
           (run.producer.empty() ? "" : ", " + run.producer) + ")\n";
    out += "command  " + run.command + "\n";
    out += "start    " + format_utc(run.start_utc_ns) + "\n";
    out += "span     " + format_duration(summary->end_ns - summary->start_ns) + "\n";
    out += "steps    " + steps_text(summary->steps) + "\n";
    out += "events   " + std::to_string(summary->event_count) +
           (trace->events_in_blocks()
                ? " in compressed blocks (sqlite3 sees no rows: `fulcrum export --format sqlite` "
                  "writes them)"
                : " as rows of the event table") +
           "\n";

    std::map<std::int32_t, std::pair<int, std::int64_t>> per_rank;  // lanes, events
    std::map<std::uint32_t, std::int64_t> per_lane;
    for (const auto& [lane, count] : summary->events_per_lane) {
        per_lane[lane.value] = count;
    }
    for (const auto& lane : trace->lanes()) {
        auto& entry = per_rank[lane.rank];
        ++entry.first;
        entry.second += per_lane[lane.id.value];
    }

    out += "\nranks (" + std::to_string(trace->ranks().size()) + ")\n";
    using Align = TextTable::Align;
    TextTable ranks({"rank", "host", "pid", "device", "dp", "pp", "cp", "tp", "lanes", "events",
                     "dropped", "clock", "status"},
                    {Align::right, Align::left, Align::right, Align::right, Align::right,
                     Align::right, Align::right, Align::right, Align::right, Align::right,
                     Align::right, Align::left, Align::left});
    for (const auto& rank : trace->ranks()) {
        const auto& counts = per_rank[rank.rank];
        ranks.add_row({std::to_string(rank.rank), text_or_unknown(rank.host),
                       std::to_string(rank.pid),
                       rank.device >= 0 ? std::to_string(rank.device) : "cpu", coordinate(rank.dp),
                       coordinate(rank.pp), coordinate(rank.cp), coordinate(rank.tp),
                       std::to_string(counts.first), std::to_string(counts.second),
                       std::to_string(rank.dropped_records), std::string(to_string(rank.alignment)),
                       rank.complete ? "complete" : "INCOMPLETE"});
    }
    out += ranks.render("  ");

    out += "\nevents by kind\n";
    TextTable kinds({"kind", "count"}, {Align::left, Align::right});
    for (int kind = 0; kind < kEventKindCount; ++kind) {
        if (summary->events_by_kind[kind] > 0) {
            kinds.add_row({std::string(to_string(static_cast<EventKind>(kind))),
                           std::to_string(summary->events_by_kind[kind])});
        }
    }
    out += kinds.render("  ");

    out += "\nlanes (" + std::to_string(trace->lanes().size()) + ")\n";
    TextTable lanes({"lane", "rank", "kind", "name", "events"},
                    {Align::right, Align::right, Align::left, Align::left, Align::right});
    for (const auto& lane : trace->lanes()) {
        lanes.add_row({std::to_string(lane.id.value), std::to_string(lane.rank),
                       std::string(to_string(lane.kind)), lane.name,
                       std::to_string(per_lane[lane.id.value])});
    }
    out += lanes.render("  ");

    auto log = trace->import_log();
    if (log && !log->empty()) {
        std::int64_t skipped = 0, notes = 0;
        for (const ImportLogEntry& entry : *log) {
            skipped += entry.skipped;
            notes += entry.skipped == 0 ? 1 : 0;
        }
        if (skipped > 0) {
            out += "\nnot recorded: " + std::to_string(skipped) +
                   " records could not be mapped (see the import_log table)\n";
        }
        if (notes > 0) {
            out += "\nimport notes (nothing skipped):\n";
            for (const ImportLogEntry& entry : *log) {
                if (entry.skipped == 0) {
                    out += "  " + entry.source + ": " + entry.reason + "\n";
                }
            }
        }
    }
    std::fputs(out.c_str(), stdout);

    if (trace->incomplete()) {
        warn("'" + path +
             "' is incomplete: a rank's recording stopped early (killed?); shown is everything "
             "up to its last commit");
        return kExitIncomplete;
    }
    return kExitOk;
}

}  // namespace

Command add_info_command(CLI::App& app) {
    auto* sub = app.add_subcommand("info",
                                   "Show a run's ranks and their 4D coordinates, lanes, "
                                   "event counts per kind, steps and time span");
    auto path = std::make_shared<std::string>();
    sub->add_option("run", *path, "A run database (.fulcrum) or a per-rank file (.sqlite)")
        ->required();
    return [path] { return run_info(*path); };
}

}  // namespace fulcrum::cli
