// Whether two runs hold the same content: the run row, ranks, lanes, every event (names and
// args compared as text, since merge renumbers strings), counters, workload and import log;
// and whether each run's event pack decodes to exactly its event rows. Used to check that an
// imported run (events in blocks) and its copy as rows (store::write_rows_copy) are one run.
#pragma once

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "core/store/trace_reader.h"

namespace fulcrum::test {

// "" when the runs at `a` and `b` hold the same content; otherwise the first difference.
inline std::string run_difference(const std::string& a, const std::string& b) {
    auto ra = store::TraceReader::open(a);
    auto rb = store::TraceReader::open(b);
    if (!ra || !rb)
        return "cannot open a run";
    const RunInfo &x = ra->run(), &y = rb->run();
    if (std::tie(x.name, x.command, x.start_utc_ns, x.config_json, x.origin, x.producer) !=
        std::tie(y.name, y.command, y.start_utc_ns, y.config_json, y.origin, y.producer))
        return "run rows differ: " + x.name + " / " + y.name + ", " + x.command + " / " +
               y.command + ", " + std::to_string(x.start_utc_ns) + " / " +
               std::to_string(y.start_utc_ns);
    if (ra->ranks().size() != rb->ranks().size())
        return "rank counts differ";
    for (std::size_t i = 0; i < ra->ranks().size(); ++i) {
        const RankInfo &p = ra->ranks()[i], &q = rb->ranks()[i];
        if (std::tie(p.rank, p.host, p.pid, p.device, p.dp, p.tp, p.pp, p.cp, p.utc_offset_ns,
                     p.complete, p.dropped_records, p.alignment, p.clock_shift_ns) !=
            std::tie(q.rank, q.host, q.pid, q.device, q.dp, q.tp, q.pp, q.cp, q.utc_offset_ns,
                     q.complete, q.dropped_records, q.alignment, q.clock_shift_ns))
            return "rank " + std::to_string(p.rank) + " differs";
    }
    if (ra->lanes().size() != rb->lanes().size())
        return "lane counts differ";
    for (std::size_t i = 0; i < ra->lanes().size(); ++i) {
        const LaneInfo &p = ra->lanes()[i], &q = rb->lanes()[i];
        if (std::tie(p.id, p.rank, p.kind, p.name, p.native_id, p.max_duration_ns) !=
            std::tie(q.id, q.rank, q.kind, q.name, q.native_id, q.max_duration_ns))
            return "lane " + std::to_string(p.id.value) + " differs";
    }
    // Every event row in storage order, with its strings as text.
    struct Row {
        Event event;
        std::string name, args;
    };
    auto rows = [](const store::TraceReader& reader, std::vector<Row>& out) {
        auto range = reader.event_rowids();
        return range && reader.scan_events(range->first, range->second, [&](const Event& e) {
            out.push_back(
                {e, std::string(reader.string(e.name)), std::string(reader.string(e.args))});
            return true;
        });
    };
    std::vector<Row> ea, eb;
    if (!rows(*ra, ea) || !rows(*rb, eb))
        return "cannot read the events";
    if (ea.size() != eb.size())
        return "event counts differ: " + std::to_string(ea.size()) + " / " +
               std::to_string(eb.size());
    for (std::size_t i = 0; i < ea.size(); ++i) {
        Event p = ea[i].event, q = eb[i].event;
        p.name = q.name = StringId{};
        p.args = q.args = StringId{};
        if (!(p == q) || ea[i].name != eb[i].name || ea[i].args != eb[i].args)
            return "event row " + std::to_string(i) + " differs (" + ea[i].name + " / " +
                   eb[i].name + ")";
    }
    // Each pack holds its own table's rows exactly.
    for (const auto* reader : {&*ra, &*rb}) {
        auto pack = reader->event_pack();
        if (!pack || !*pack)
            return "no event pack in " + reader->path();
        std::vector<Event> packed, by_lane;
        std::vector<std::vector<Event>> lanes(reader->lanes().size() + 2);
        if (!reader->scan_event_pack((*pack)->first_block, (*pack)->end_block,
                                     [&](LaneId lane) { return &lanes.at(lane.value); },
                                     [] { return true; }))
            return "cannot decode the event pack of " + reader->path();
        for (const auto& lane : lanes)
            packed.insert(packed.end(), lane.begin(), lane.end());
        std::vector<Row> table;
        if (!rows(*reader, table))
            return "cannot read the events";
        for (const Row& row : table)
            by_lane.push_back(row.event);
        std::stable_sort(by_lane.begin(), by_lane.end(), [](const Event& p, const Event& q) {
            return p.lane.value < q.lane.value;
        });
        if (packed != by_lane)
            return "the event pack of " + reader->path() + " is not its event rows";
    }
    auto counters_a = ra->counters(), counters_b = rb->counters();
    if (!counters_a || !counters_b || counters_a->size() != counters_b->size())
        return "counters differ";
    for (std::size_t i = 0; i < counters_a->size(); ++i) {
        const CounterSample &p = (*counters_a)[i], &q = (*counters_b)[i];
        if (std::tie(p.rank, p.name, p.time_ns, p.value) !=
            std::tie(q.rank, q.name, q.time_ns, q.value))
            return "counter " + std::to_string(i) + " differs";
    }
    auto log_a = ra->import_log(), log_b = rb->import_log();
    if (!log_a || !log_b || log_a->size() != log_b->size())
        return "import logs differ";
    for (std::size_t i = 0; i < log_a->size(); ++i) {
        const ImportLogEntry &p = (*log_a)[i], &q = (*log_b)[i];
        if (std::tie(p.source, p.record_index, p.reason, p.record, p.skipped) !=
            std::tie(q.source, q.record_index, q.reason, q.record, q.skipped))
            return "import_log row " + std::to_string(i) + " differs: " + p.reason + " / " +
                   q.reason;
    }
    auto work_a = ra->workload(), work_b = rb->workload();
    if (!work_a || !work_b || work_a->size() != work_b->size())
        return "workloads differ";
    for (std::size_t i = 0; i < work_a->size(); ++i) {
        const WorkloadEntry &p = (*work_a)[i], &q = (*work_b)[i];
        if (std::tie(p.rank, p.step, p.microbatch, p.doc_id, p.doc_length, p.token_begin,
                     p.token_end, p.balancer) != std::tie(q.rank, q.step, q.microbatch, q.doc_id,
                                                          q.doc_length, q.token_begin, q.token_end,
                                                          q.balancer))
            return "workload row " + std::to_string(i) + " differs";
    }
    return "";
}

}  // namespace fulcrum::test
