// Nsight Systems SQLite exports (`nsys export --type sqlite`) into Fulcrum rank files
// (docs/import.md, "Nsight Systems"; docs/sources.md, "Trace formats").
//
// The export's tables exist only when they have rows and their columns change between
// versions, so every table and column is probed before it is read: a missing table is
// skipped, a missing optional column reads as "unknown". One profiled process is one rank;
// kernels, copies and memsets go on one lane per (device, stream), runtime API calls and NVTX
// events on one lane per thread. NVTX in the `fulcrum` domain (a fulcrum-train run profiled by
// nsys) is read with the collector's parser (core/trace/annotations.h) (docs/annotations.md).
#include <sqlite3.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <set>
#include <unordered_map>

#include "core/import/importer.h"
#include "core/import/nsys/megatron.h"
#include "core/trace/annotations.h"
#include "core/util/ordered_pool.h"

namespace fulcrum::importer {

namespace {

constexpr std::uint32_t kFulcrumApplicationId = 0x46554C43;  // "FULC"
constexpr std::int64_t kPidShift = 0x1000000;

// NVTX_EVENTS.eventType values (ENUM_NSYS_EVENT_TYPE).
constexpr std::int64_t kNvtxMark = 34;
constexpr std::int64_t kNvtxPushPop = 59;
constexpr std::int64_t kNvtxStartEnd = 60;
constexpr std::int64_t kNvtxDomainCreate = 75;
// The rows that become events: marks, push/pop and start/end ranges, as an SQL list.
std::string nvtx_event_types() {
    return std::to_string(kNvtxMark) + ", " + std::to_string(kNvtxPushPop) + ", " +
           std::to_string(kNvtxStartEnd);
}

// A process's key: globalTid / 2^24 (the PID with the hardware and VM ids above it), so two
// hosts' processes with one PID stay apart.
std::int64_t process_key(std::int64_t global_id) {
    return global_id / kPidShift;
}
std::int64_t tid_of(std::int64_t global_tid) {
    return global_tid % kPidShift;
}

// Thin read-only access to the export; no Fulcrum schema here.
class Source {
public:
    explicit Source(const ImportInput& input) : path_(input.path), bytes_(input.bytes) {}
    ~Source() {
        if (db_ != nullptr) {
            sqlite3_close_v2(db_);
        }
    }
    Source(const Source&) = delete;
    Source& operator=(const Source&) = delete;

    Status open() {
        if (bytes_ != nullptr) {
            // Bytes in memory: an in-memory database over them, read-only, nothing on disk.
            if (sqlite3_open_v2(":memory:", &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                                nullptr) != SQLITE_OK ||
                sqlite3_deserialize(
                    db_, "main",
                    reinterpret_cast<unsigned char*>(const_cast<char*>(bytes_->data())),
                    static_cast<sqlite3_int64>(bytes_->size()),
                    static_cast<sqlite3_int64>(bytes_->size()),
                    SQLITE_DESERIALIZE_READONLY) != SQLITE_OK) {
                return damaged("cannot open it");
            }
        } else if (sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
                                   nullptr) != SQLITE_OK) {
            return damaged("cannot open it");
        }
        // A hostile file must not make SQLite allocate without bound.
        sqlite3_limit(db_, SQLITE_LIMIT_LENGTH, 64 << 20);
        sqlite3_exec(db_, "PRAGMA cell_size_check = ON", nullptr, nullptr, nullptr);
        sqlite3_stmt* stmt = nullptr;
        if (sqlite3_prepare_v2(db_, "SELECT name FROM sqlite_master WHERE type = 'table'", -1,
                               &stmt, nullptr) != SQLITE_OK) {
            return damaged("cannot read its schema");
        }
        int step = SQLITE_ROW;
        while ((step = sqlite3_step(stmt)) == SQLITE_ROW) {
            const auto* text = sqlite3_column_text(stmt, 0);
            if (text != nullptr) {
                tables_.insert(reinterpret_cast<const char*>(text));
            }
        }
        sqlite3_finalize(stmt);
        if (step != SQLITE_DONE) {
            return damaged("cannot read its schema");
        }
        return {};
    }

    bool has_table(const std::string& table) const { return tables_.count(table) != 0; }

    // The table's columns (empty when the table is missing or unreadable).
    const std::set<std::string>& columns(const std::string& table) {
        auto [at, added] = columns_.try_emplace(table);
        if (added && has_table(table)) {
            sqlite3_stmt* stmt = nullptr;
            const std::string sql = "PRAGMA table_info(\"" + table + "\")";
            if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK) {
                while (sqlite3_step(stmt) == SQLITE_ROW) {
                    const auto* text = sqlite3_column_text(stmt, 1);
                    if (text != nullptr) {
                        at->second.insert(reinterpret_cast<const char*>(text));
                    }
                }
            }
            sqlite3_finalize(stmt);
        }
        return at->second;
    }
    bool has_column(const std::string& table, const std::string& column) {
        return columns(table).count(column) != 0;
    }

    // Runs `sql`, calling `row` for each row; stops when `row` returns false. An SQLite
    // failure here means a damaged file (tables and columns were probed first).
    template <typename Row>
    Status query(const std::string& sql, Row&& row) {
        sqlite3_stmt* stmt = nullptr;
        if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
            sqlite3_finalize(stmt);
            return damaged("cannot read it");
        }
        int step = SQLITE_ROW;
        bool go_on = true;
        while (go_on && (step = sqlite3_step(stmt)) == SQLITE_ROW) {
            go_on = row(stmt);
        }
        sqlite3_finalize(stmt);
        if (go_on && step != SQLITE_DONE) {
            return damaged("cannot read it");
        }
        return {};
    }

    Error damaged(std::string_view what) const {
        const std::string reason = db_ != nullptr ? sqlite3_errmsg(db_) : "out of memory";
        return Error{ErrorCode::invalid_input,
                     "'" + path_ + "': " + std::string(what) + " (" + reason +
                         "); is it a complete Nsight Systems SQLite export?"};
    }

private:
    std::string path_;
    const std::string* bytes_ = nullptr;
    sqlite3* db_ = nullptr;
    std::set<std::string> tables_;
    std::map<std::string, std::set<std::string>> columns_;
};

std::int64_t int_or(sqlite3_stmt* stmt, int column, std::int64_t fallback) {
    return sqlite3_column_type(stmt, column) == SQLITE_NULL ? fallback
                                                            : sqlite3_column_int64(stmt, column);
}

std::string text_of(sqlite3_stmt* stmt, int column) {
    const auto* text = sqlite3_column_text(stmt, column);
    return text != nullptr
               ? std::string(reinterpret_cast<const char*>(text),
                             static_cast<std::size_t>(sqlite3_column_bytes(stmt, column)))
               : std::string();
}

bool contains_nocase(std::string_view text, std::string_view part) {
    return std::search(text.begin(), text.end(), part.begin(), part.end(), [](char a, char b) {
               return std::tolower(static_cast<unsigned char>(a)) ==
                      std::tolower(static_cast<unsigned char>(b));
           }) != text.end();
}

// "cudaLaunchKernel_v7000" -> "cudaLaunchKernel": nsys keeps CUPTI's versioned names.
std::string api_name(std::string name) {
    const auto at = name.rfind("_v");
    if (at != std::string::npos && at + 2 < name.size() &&
        std::all_of(name.begin() + static_cast<std::ptrdiff_t>(at) + 2, name.end(),
                    [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; })) {
        name.resize(at);
    }
    return name;
}

std::string_view copy_label(std::int64_t kind) {
    switch (kind) {
        case 1:
            return "Memcpy HtoD";
        case 2:
            return "Memcpy DtoH";
        case 3:
            return "Memcpy HtoA";
        case 4:
            return "Memcpy AtoH";
        case 5:
            return "Memcpy AtoA";
        case 6:
            return "Memcpy AtoD";
        case 7:
            return "Memcpy DtoA";
        case 8:
            return "Memcpy DtoD";
        case 9:
            return "Memcpy HtoH";
        case 10:
            return "Memcpy PtoP";
        default:
            return "Memcpy";
    }
}

// Megatron-LM's pipeline hand-over ranges of each process (megatron.h), on the thread that made
// the most of them: the schedule's.
struct ProcessCalls {
    std::int64_t global_tid = 0;
    std::vector<megatron::P2pRange> calls;     // by start
    std::vector<std::string> texts;            // each call's range text
    std::vector<megatron::PhaseRange> phases;  // the interleaved schedule's, by start
};

Result<std::map<std::int64_t, ProcessCalls>> read_p2p_calls(Source& source) {
    std::map<std::int64_t, ProcessCalls> found;
    const std::string table = "NVTX_EVENTS";
    if (!source.has_column(table, "start") || !source.has_column(table, "end") ||
        !source.has_column(table, "eventType") || !source.has_column(table, "globalTid")) {
        return found;
    }
    const bool text = source.has_column(table, "text");
    const bool text_id = source.has_column(table, "textId") && source.has_table("StringIds");
    if (!text && !text_id) {
        return found;
    }
    const std::string registered = "(SELECT value FROM StringIds WHERE id = textId)";
    const std::string name = text && text_id ? "COALESCE(text, " + registered + ")"
                             : text          ? std::string("text")
                                             : registered;
    // The registered strings that match are found once (SQLite runs an uncorrelated IN
    // subquery once), so the scan of a large NVTX table looks up no string per row: a third of
    // the time of matching each row's text, measured on two million rows.
    const std::string like = "LIKE '" + std::string(megatron::kP2pLike) + "'";
    std::string matches;
    if (text)
        matches = "text " + like;
    if (text_id) {
        matches += (matches.empty() ? "" : " OR ") +
                   std::string("textId IN (SELECT id FROM StringIds WHERE value ") + like + ")";
    }
    const std::string sql = "SELECT globalTid, start, \"end\", " + name +
                            " FROM NVTX_EVENTS WHERE eventType IN (" +
                            std::to_string(kNvtxPushPop) + ", " + std::to_string(kNvtxStartEnd) +
                            ") AND \"end\" >= start AND (" + matches + ")";
    using Call = std::pair<megatron::P2pRange, std::string>;
    std::map<std::int64_t, std::map<std::int64_t, std::vector<Call>>> by_thread;
    std::map<std::int64_t, std::vector<megatron::PhaseRange>> phases;  // by globalTid
    auto status = source.query(sql, [&](sqlite3_stmt* stmt) {
        std::string message = text_of(stmt, 3);
        const std::int64_t global_tid = int_or(stmt, 0, 0);
        if (const auto call = megatron::parse_p2p_range(message)) {
            by_thread[process_key(global_tid)][global_tid].emplace_back(
                megatron::P2pRange{int_or(stmt, 1, 0), int_or(stmt, 2, 0), *call},
                std::move(message));
        } else if (megatron::is_schedule_phase(message)) {
            phases[global_tid].emplace_back(int_or(stmt, 1, 0), int_or(stmt, 2, 0));
        }
        return true;
    });
    if (!status) {
        return status.error();
    }
    for (auto& [process, threads] : by_thread) {
        auto busiest = std::max_element(threads.begin(), threads.end(), [](auto& a, auto& b) {
            return a.second.size() < b.second.size();
        });
        std::vector<Call>& calls = busiest->second;
        std::sort(calls.begin(), calls.end(), [](const Call& a, const Call& b) {
            return std::tie(a.first.start_ns, a.first.end_ns) <
                   std::tie(b.first.start_ns, b.first.end_ns);
        });
        ProcessCalls& process_calls = found[process];
        process_calls.global_tid = busiest->first;
        process_calls.phases = std::move(phases[busiest->first]);
        std::sort(process_calls.phases.begin(), process_calls.phases.end());
        for (Call& call : calls) {
            process_calls.calls.push_back(call.first);
            process_calls.texts.push_back(std::move(call.second));
        }
    }
    return found;
}

// "2 at stage 0, 1 at stage 2": how many ranks each stage holds, for the import log.
std::string stage_counts(const std::map<std::int32_t, std::int32_t>& ranks_of_stage) {
    std::string text;
    for (const auto& [stage, ranks] : ranks_of_stage) {
        text += (text.empty() ? "" : ", ") + std::to_string(ranks) + " at stage " +
                std::to_string(stage);
    }
    return text;
}

// The grid of a Megatron-LM job from its processes' hand-over ranges (megatron.h), by each
// stage's warm-up W. 1F1B: the pipeline's depth p is one more than the most warm-up forwards
// of any stage, each stage s = p − 1 − W. Interleaved: W = 2 (p − s − 1) + (v − 1) · p, so the
// warm-ups span 2 (p − 1), the last stage's is (v − 1) · p and the forwards of a step m · v. The
// ranks of one stage — DP, TP and CP replicas alike, which an nsys export does not tell apart —
// are counted as DP in the order of the inputs. All or nothing: a stage that is not told, or
// stages that hold unequal numbers of ranks, leave the job without a grid and say why.
JobStructure megatron_grid(const std::map<std::pair<int, std::int64_t>, megatron::Warmup>& warmups,
                           int without_overlap, int unordered) {
    using megatron::MegatronSchedule;
    JobStructure job;
    if (warmups.empty()) {
        if (without_overlap > 0) {
            job.problem =
                "Megatron-LM's interleaved schedule without overlap_p2p_comm "
                "(send_forward_backward_recv_forward_backward) in " +
                std::to_string(without_overlap) +
                " processes: a forward and a backward lie between two of its hand-over ranges, "
                "so its passes are not derived from an nsys export";
        } else if (unordered > 0) {
            job.problem = "Megatron-LM's pipeline hand-over ranges in " +
                          std::to_string(unordered) +
                          " processes, but in no step in the order of its 1F1B or interleaved "
                          "schedule (or in steps whose warm-ups disagree): passes are not derived";
        }
        return job;
    }
    const MegatronSchedule schedule = warmups.begin()->second.schedule;
    std::int32_t most = 0, least = INT32_MAX, forwards = 0;
    for (const auto& [process, warmup] : warmups) {
        if (warmup.schedule != schedule) {
            job.problem =
                "Megatron-LM's hand-over ranges of the 1F1B and the interleaved schedule in one "
                "job: passes are not derived";
            return job;
        }
        most = std::max(most, warmup.forwards);
        least = std::min(least, warmup.forwards);
        forwards = std::max(forwards, warmup.microbatches);
    }
    const bool interleaved = schedule == MegatronSchedule::interleaved;
    std::int32_t depth = most + 1, chunks = 1;
    // A stage's warm-up falls by one forward a stage under 1F1B, by two from `least` interleaved.
    const std::int32_t last_warmup = interleaved ? least : 0, spacing = interleaved ? 2 : 1;
    const auto stage_of = [&](const megatron::Warmup& warmup) {
        return depth - 1 - (warmup.forwards - last_warmup) / spacing;
    };
    if (interleaved) {
        depth = (most - least) / 2 + 1;
        chunks = depth > 1 && least % depth == 0 ? least / depth + 1 : 0;
        bool fits = (most - least) % 2 == 0 && depth > 1 && chunks >= 2 && forwards % chunks == 0;
        for (const auto& [process, warmup] : warmups) {
            fits = fits && !warmup.saturated && warmup.microbatches == forwards;
        }
        if (!fits) {
            job.problem =
                "Megatron-LM's interleaved schedule whose warm-ups (" + std::to_string(least) +
                " to " + std::to_string(most) +
                " forwards) are not those of its default groups of micro-batches "
                "(microbatch_group_size_per_vp_stage = pp), or that ran every micro-batch in its "
                "warm-up: stages and chunks are not told, passes are not derived";
            return job;
        }
    }
    std::map<std::int32_t, std::int32_t> ranks_of_stage;
    for (const auto& [process, warmup] : warmups) {
        if (!interleaved && warmup.saturated && warmup.forwards < most) {
            job.problem = "a Megatron-LM stage ran all " + std::to_string(warmup.microbatches) +
                          " micro-batches in its warm-up, so its place in a pipeline of " +
                          std::to_string(depth) +
                          " or more stages is not told: passes are not derived";
            return job;
        }
        ++ranks_of_stage[stage_of(warmup)];
    }
    const std::int32_t width = ranks_of_stage.begin()->second;
    for (std::int32_t stage = 0; stage < depth; ++stage) {
        if (ranks_of_stage[stage] != width) {
            job.problem =
                "Megatron-LM's hand-over ranges place the ranks given unevenly over "
                "the " +
                std::to_string(depth) + " pipeline stages their warm-ups imply (" +
                stage_counts(ranks_of_stage) +
                "): is a rank's file missing? passes are not derived";
            return job;
        }
    }
    std::map<std::int32_t, std::int32_t> placed;
    for (const auto& [process, warmup] : warmups) {
        const std::int32_t stage = stage_of(warmup);
        job.places[process] = structure::Coordinates{placed[stage]++, 0, stage, 0};
    }
    job.found = true;
    job.grid.dp = width;
    job.grid.pp = depth;
    job.schedule = interleaved ? "interleaved" : "1f1b";
    job.microbatches = forwards / chunks;
    job.virtual_stages = chunks;
    job.microbatch_group = depth;
    const std::string counted =
        "; the " + std::to_string(width) +
        " ranks of a stage counted as dp in the order of the files (an nsys export does not "
        "tell DP, TP and CP replicas apart)";
    job.rule = interleaved
                   ? "Megatron-LM's pipeline hand-over ranges (--nvtx-ranges) in the order of its "
                     "interleaved schedule: pp " +
                         std::to_string(depth) + " and " + std::to_string(chunks) +
                         " model chunks a stage from the warm-ups (" + std::to_string(least) +
                         " to " + std::to_string(most) +
                         " forwards: 2 (p - s - 1) + (v - 1) p, Megatron-LM's default groups of "
                         "p micro-batches)" +
                         counted
                   : "Megatron-LM's pipeline hand-over ranges (--nvtx-ranges): pp " +
                         std::to_string(depth) +
                         ", one more than the most warm-up forwards of a stage (" +
                         std::to_string(most) + "), each stage p - 1 - its warm-up" + counted;
    return job;
}

// Whether no CUDA call of the schedule thread lies inside any of its recv_forward ranges, as on
// the first stage, whose recv_forward receives nothing (schedules.py: the first stage's input
// is None), while every other stage's launches NCCL's receive there. False where the export has
// no CUDA calls of the thread to tell by.
Result<bool> receives_nothing(Source& source, const ProcessCalls& found) {
    std::vector<std::pair<std::int64_t, std::int64_t>> receives;
    for (const megatron::P2pRange& call : found.calls) {
        if (call.call == megatron::P2pCall::recv_forward)
            receives.emplace_back(call.start_ns, call.end_ns);
    }
    const std::string table = "CUPTI_ACTIVITY_KIND_RUNTIME";
    if (receives.empty() || !source.has_column(table, "start") ||
        !source.has_column(table, "globalTid")) {
        return false;
    }
    std::int64_t calls = 0, inside = 0;
    auto status = source.query(
        "SELECT start FROM " + table + " WHERE globalTid = " + std::to_string(found.global_tid) +
            " AND start BETWEEN " + std::to_string(found.calls.front().start_ns) + " AND " +
            std::to_string(found.calls.back().end_ns),
        [&](sqlite3_stmt* stmt) {
            const std::int64_t at = int_or(stmt, 0, 0);
            ++calls;
            const auto after =
                std::upper_bound(receives.begin(), receives.end(), at,
                                 [](std::int64_t t, const auto& range) { return t < range.first; });
            if (after != receives.begin() && at <= std::prev(after)->second)
                ++inside;
            return inside == 0;
        });
    if (!status)
        return status.error();
    return calls > 0 && inside == 0;
}

// A 1F1B job of which only some ranks' files were given (Megatron-LM's releases core_r0.8 to
// core_r0.12 profile rank 0 alone unless `--profile-ranks` says otherwise): when a rank given is
// the first stage by its receives (receives_nothing) and by the most warm-up forwards, the pipeline
// is one deeper than its warm-up and every rank given is placed by its own; the DP degree counts
// the most ranks given for a stage.
JobStructure megatron_partial_grid(
    const std::map<std::pair<int, std::int64_t>, megatron::Warmup>& warmups,
    const std::set<std::pair<int, std::int64_t>>& first_stage, const std::string& why) {
    JobStructure job;
    std::int32_t first = -1;
    for (const auto& process : first_stage) {
        const megatron::Warmup& warmup = warmups.at(process);
        if (warmup.saturated || (first >= 0 && warmup.forwards != first)) {
            job.problem = why;
            return job;
        }
        first = warmup.forwards;
    }
    const std::int32_t depth = first + 1;
    std::map<std::int32_t, std::int32_t> placed;
    int left_out = 0;
    for (const auto& [process, warmup] : warmups) {
        const bool told =
            warmup.forwards <= first && (!warmup.saturated || warmup.forwards == first);
        if (!told) {
            ++left_out;
            continue;
        }
        const std::int32_t stage = depth - 1 - warmup.forwards;
        job.places[process] = structure::Coordinates{placed[stage]++, 0, stage, 0};
        job.microbatches = std::max(job.microbatches, warmup.microbatches);
    }
    std::int32_t width = 0;
    for (const auto& [stage, count] : placed) {
        width = std::max(width, count);
    }
    job.found = true;
    job.grid.dp = width;
    job.grid.pp = depth;
    job.schedule = "1f1b";
    job.microbatch_group = depth;
    job.rule =
        "Megatron-LM's pipeline hand-over ranges (--nvtx-ranges) of the ranks given, "
        "which are not the whole job (" +
        stage_counts(placed) + "): pp " + std::to_string(depth) +
        ", one more than the warm-up forwards of the first stage's rank (told by its "
        "recv_forward, which launches nothing), each rank's stage p - 1 - its warm-up, dp "
        "the most ranks given for a stage" +
        (left_out > 0 ? "; " + std::to_string(left_out) +
                            " ranks that ran every micro-batch in their warm-up left "
                            "unplaced"
                      : std::string());
    return job;
}

// `first_index`: the first input's index among the job's (a lone read surveys its own input).
Result<JobStructure> survey_megatron(const std::vector<ImportInput>& inputs,
                                     const std::atomic<bool>* cancel, int first_index = 0) {
    // Each input's processes' warm-ups, read side by side (a job's thousand exports would
    // otherwise be opened one after the other before any is imported), taken in input order.
    struct Surveyed {
        std::vector<std::pair<std::int64_t, megatron::Warmup>> warmups;
        int without_overlap = 0, unordered = 0;
    };
    std::map<std::pair<int, std::int64_t>, megatron::Warmup> warmups;
    int without_overlap = 0, unordered = 0;
    const int workers = worker_threads();
    const Status read = produce_in_order<Surveyed>(
        inputs.size(), workers, 2 * static_cast<std::size_t>(workers),
        [&](int, std::size_t i) -> Result<Surveyed> {
            Surveyed surveyed;
            Source source(inputs[i]);
            if (!source.open() || !source.has_table("NVTX_EVENTS")) {
                return surveyed;  // its read says what is wrong with it
            }
            auto calls = read_p2p_calls(source);
            if (!calls) {
                return surveyed;
            }
            for (const auto& [process, found] : *calls) {
                const megatron::MegatronThread thread =
                    megatron::megatron_passes(found.calls, found.phases);
                if (thread.schedule == megatron::MegatronSchedule::interleaved_without_overlap) {
                    ++surveyed.without_overlap;
                } else if (const auto warmup = megatron::warmup_of(thread)) {
                    surveyed.warmups.emplace_back(process, *warmup);
                } else {
                    ++surveyed.unordered;
                }
            }
            return surveyed;
        },
        [&](std::size_t i, Surveyed&& surveyed) -> Status {
            for (const auto& [process, warmup] : surveyed.warmups) {
                warmups[{first_index + static_cast<int>(i), process}] = warmup;
            }
            without_overlap += surveyed.without_overlap;
            unordered += surveyed.unordered;
            return {};
        },
        cancel);
    if (!read) {
        return read.error().code == ErrorCode::cancelled
                   ? Error{ErrorCode::cancelled, "import cancelled"}
                   : read.error();
    }
    JobStructure job = megatron_grid(warmups, without_overlap, unordered);
    if (job.found || warmups.empty() ||
        warmups.begin()->second.schedule != megatron::MegatronSchedule::one_f_one_b) {
        return job;
    }
    // Some of the job's files only: the ranks with the most warm-up forwards may be the first
    // stage's, which their receives tell.
    std::int32_t most = 0;
    for (const auto& [process, warmup] : warmups) {
        most = std::max(most, warmup.forwards);
    }
    std::set<std::pair<int, std::int64_t>> first_stage;
    for (const auto& [process, warmup] : warmups) {
        if (warmup.forwards != most) {
            continue;
        }
        Source source(inputs[static_cast<std::size_t>(process.first - first_index)]);
        if (!source.open()) {
            continue;
        }
        auto calls = read_p2p_calls(source);
        if (!calls || !calls->contains(process.second)) {
            continue;
        }
        auto nothing = receives_nothing(source, calls->at(process.second));
        if (nothing && *nothing) {
            first_stage.insert(process);
        }
    }
    if (first_stage.empty()) {
        job.problem +=
            "; no rank given is the first stage's (whose recv_forward receives "
            "nothing), so the pipeline's depth is not told";
        return job;
    }
    return megatron_partial_grid(warmups, first_stage, job.problem);
}

struct Process {
    std::int64_t key = 0;
    std::int32_t rank = 0;
    RankInfo info;
    std::set<std::int64_t> devices;
};

class Import {
public:
    Import(Source& source, TraceSink& writer, const ImportFileOptions& options, std::string name,
           const JobStructure& job)
        : source_(source),
          writer_(writer),
          options_(options),
          log_(writer, std::move(name)),
          job_(job) {}

    Status run(const std::string& input) {
        if (auto status = read_strings(); !status)
            return status;
        if (auto status = read_domains(); !status)
            return status;
        if (auto status = find_processes(); !status)
            return status;
        if (processes_.empty()) {
            // Nothing to attribute: still one (empty) rank, so the run opens.
            Process process;
            process.rank = options_.input_index;
            process.info.rank = process.rank;
            processes_.emplace(-1, process);
        }
        if (job_.found || !job_.problem.empty()) {
            auto calls = read_p2p_calls(source_);
            if (!calls)
                return calls.error();
            megatron_calls_ = std::move(*calls);
        }
        if (auto status = assign_ranks(input); !status)
            return status;
        const struct {
            Status (Import::*read)();
            double weight;
        } tables[] = {{&Import::read_kernels, 0.35},
                      {&Import::read_memcpy, 0.1},
                      {&Import::read_memset, 0.05},
                      {&Import::read_runtime, 0.3},
                      {&Import::read_nvtx, 0.2}};
        double done = 0.1;
        for (const auto& table : tables) {
            auto status = (this->*table.read)();
            flush_events();
            if (!status)
                return status;
            done += table.weight * 0.9;
            if (options_.progress) {
                options_.progress(std::min(done, 1.0));
            }
        }
        add_megatron_structure();
        flush_events();
        log_.finish();
        return {};
    }

private:
    bool cancelled() const { return options_.cancel != nullptr && options_.cancel->load(); }

    std::string string(std::int64_t id) const {
        auto at = strings_.find(id);
        return at != strings_.end() ? at->second : std::string();
    }
    // A name column holds a StringIds id (current exports) or the text itself (old ones).
    std::string name_at(sqlite3_stmt* stmt, int column) const {
        switch (sqlite3_column_type(stmt, column)) {
            case SQLITE_INTEGER:
                return string(sqlite3_column_int64(stmt, column));
            case SQLITE_TEXT:
                return text_of(stmt, column);
            default:
                return {};
        }
    }

    void skip(const std::string& table, std::int64_t row, const std::string& reason,
              const std::string& record, std::int64_t count = 1) {
        log_.skip(table + ": " + reason, row, record, count);
    }

    // A table that lacks a column it cannot do without: every row of it is skipped.
    void skip_table(const std::string& table, const char* column) {
        std::int64_t rows = 0;
        (void)source_.query("SELECT COUNT(*) FROM \"" + table + "\"", [&](sqlite3_stmt* stmt) {
            rows = sqlite3_column_int64(stmt, 0);
            return false;
        });
        skip(table, -1, "table skipped: it has no '" + std::string(column) + "' column", "", rows);
    }

    // Whether `table` is there with every column in `needed`: a missing table holds nothing, a
    // table without a needed column is skipped whole, with the reason in the import log.
    bool readable(const std::string& table, std::initializer_list<const char*> needed) {
        if (!source_.has_table(table)) {
            return false;
        }
        for (const char* column : needed) {
            if (!source_.has_column(table, column)) {
                skip_table(table, column);
                return false;
            }
        }
        return true;
    }

    Status read_strings() {
        if (!source_.has_column("StringIds", "id") || !source_.has_column("StringIds", "value")) {
            return {};
        }
        return source_.query("SELECT id, value FROM StringIds", [&](sqlite3_stmt* stmt) {
            strings_.emplace(sqlite3_column_int64(stmt, 0), text_of(stmt, 1));
            return !cancelled();
        });
    }

    // NVTX domains: eventType 75 rows name a domainId.
    Status read_domains() {
        const std::string table = "NVTX_EVENTS";
        if (!source_.has_column(table, "eventType") || !source_.has_column(table, "domainId")) {
            return {};
        }
        const bool text = source_.has_column(table, "text");
        const bool text_id = source_.has_column(table, "textId");
        const std::string sql =
            "SELECT domainId, " + std::string(text ? "text" : "NULL") + ", " +
            (text_id ? "textId" : "NULL") +
            " FROM NVTX_EVENTS WHERE eventType = " + std::to_string(kNvtxDomainCreate);
        return source_.query(sql, [&](sqlite3_stmt* stmt) {
            std::string name = text_of(stmt, 1);
            if (name.empty() && sqlite3_column_type(stmt, 2) != SQLITE_NULL) {
                name = string(sqlite3_column_int64(stmt, 2));
            }
            domains_[int_or(stmt, 0, 0)] = name;
            return true;
        });
    }

    // Every process with at least one event becomes a rank, in globalPid order.
    Status find_processes() {
        auto add = [&](std::int64_t key, std::int64_t device) {
            auto& process = processes_[key];
            process.key = key;
            if (device >= 0) {
                process.devices.insert(device);
            }
        };
        for (const char* table : {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                                  "CUPTI_ACTIVITY_KIND_MEMSET"}) {
            if (!source_.has_column(table, "globalPid")) {
                continue;
            }
            const bool device = source_.has_column(table, "deviceId");
            const std::string sql = "SELECT DISTINCT globalPid / " + std::to_string(kPidShift) +
                                    ", " + (device ? "deviceId" : "-1") + " FROM " + table;
            auto status = source_.query(sql, [&](sqlite3_stmt* stmt) {
                add(sqlite3_column_int64(stmt, 0), int_or(stmt, 1, -1));
                return true;
            });
            if (!status)
                return status;
        }
        for (const char* table : {"CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"}) {
            if (!source_.has_column(table, "globalTid")) {
                continue;
            }
            std::string sql =
                "SELECT DISTINCT globalTid / " + std::to_string(kPidShift) + " FROM " + table;
            if (std::string_view(table) == "NVTX_EVENTS" &&
                source_.has_column(table, "eventType")) {
                sql += " WHERE eventType IN (" + nvtx_event_types() + ")";
            }
            auto status = source_.query(sql, [&](sqlite3_stmt* stmt) {
                add(int_or(stmt, 0, 0), -1);
                return true;
            });
            if (!status)
                return status;
        }
        return {};
    }

    // The fulcrum domain's `fulcrum.rank` mark of each process, if it has one.
    Status read_rank_marks() {
        std::set<std::int64_t> fulcrum_domains;
        for (const auto& [id, name] : domains_) {
            if (name == "fulcrum")
                fulcrum_domains.insert(id);
        }
        const std::string table = "NVTX_EVENTS";
        if (fulcrum_domains.empty() || !source_.has_column(table, "globalTid") ||
            !source_.has_column(table, "eventType")) {
            return {};
        }
        std::string domain_list;
        for (auto id : fulcrum_domains) {
            domain_list += (domain_list.empty() ? "" : ", ") + std::to_string(id);
        }
        const bool text = source_.has_column(table, "text");
        const bool text_id = source_.has_column(table, "textId");
        const std::string sql = "SELECT globalTid, " + std::string(text ? "text" : "NULL") + ", " +
                                (text_id ? "textId" : "NULL") +
                                " FROM NVTX_EVENTS WHERE eventType = " + std::to_string(kNvtxMark) +
                                " AND domainId IN (" + domain_list + ")";
        return source_.query(sql, [&](sqlite3_stmt* stmt) {
            std::string message = text_of(stmt, 1);
            if (message.empty() && sqlite3_column_type(stmt, 2) != SQLITE_NULL) {
                message = string(sqlite3_column_int64(stmt, 2));
            }
            const auto mark = split_mark_message(message);
            if (mark.name != kRankMark) {
                return true;
            }
            auto parsed = parse_rank_mark(mark.json);
            auto at = processes_.find(process_key(int_or(stmt, 0, 0)));
            if (parsed && parsed->rank >= 0 && at != processes_.end()) {
                rank_marks_[at->first] = *parsed;
            }
            return true;
        });
    }

    Status assign_ranks(const std::string& input) {
        if (auto status = read_rank_marks(); !status)
            return status;
        std::int64_t utc_start = 0;
        if (source_.has_column("TARGET_INFO_SESSION_START_TIME", "utcEpochNs")) {
            auto status = source_.query("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME",
                                        [&](sqlite3_stmt* stmt) {
                                            utc_start = int_or(stmt, 0, 0);
                                            return false;
                                        });
            if (!status)
                return status;
        }
        std::string host;
        if (source_.has_column("TARGET_INFO_SYSTEM_ENV", "name") &&
            source_.has_column("TARGET_INFO_SYSTEM_ENV", "value")) {
            auto status =
                source_.query("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'",
                              [&](sqlite3_stmt* stmt) {
                                  host = text_of(stmt, 0);
                                  return false;
                              });
            if (!status)
                return status;
        }
        std::map<std::int64_t, std::string> process_names;
        if (source_.has_column("PROCESSES", "globalPid") &&
            source_.has_column("PROCESSES", "name")) {
            auto status =
                source_.query("SELECT globalPid, name FROM PROCESSES", [&](sqlite3_stmt* stmt) {
                    process_names[process_key(int_or(stmt, 0, 0))] = text_of(stmt, 1);
                    return true;
                });
            if (!status)
                return status;
        }

        const bool several = processes_.size() > 1;
        std::int32_t index = 0;
        std::set<std::int32_t> used;
        std::string listing;
        for (auto& [key, process] : processes_) {
            RankInfo& info = process.info;
            info.rank = several ? options_.input_index * 64 + index : options_.input_index;
            info.pid = key >= 0 ? key % kPidShift : 0;
            info.host = host;
            info.device =
                process.devices.empty() ? -1 : static_cast<std::int32_t>(*process.devices.begin());
            info.utc_offset_ns = utc_start;
            if (const structure::Coordinates* place = megatron_place(key)) {
                info.dp = place->dp;
                info.tp = place->tp;
                info.pp = place->pp;
                info.cp = place->cp;
            }
            if (auto mark = rank_marks_.find(key);
                mark != rank_marks_.end() && used.count(mark->second.rank) == 0) {
                info.rank = mark->second.rank;
                info.dp = mark->second.dp;
                info.pp = mark->second.pp;
                info.cp = mark->second.cp;
                info.tp = mark->second.tp;
                if (mark->second.device >= 0)
                    info.device = mark->second.device;
            }
            used.insert(info.rank);
            process.rank = info.rank;
            writer_.add_rank(info);
            listing += (listing.empty() ? "" : ", ") + std::string("pid ") +
                       std::to_string(info.pid) +
                       (process_names.count(key) ? " (" + process_names[key] + ")" : "") +
                       " -> rank " + std::to_string(info.rank);
            ++index;
        }
        if (several) {
            const std::string text = "'" + input + "' holds " + std::to_string(processes_.size()) +
                                     " processes; each became a rank (" + listing + ")";
            log_.note(text);
            if (options_.warnings != nullptr) {
                options_.warnings->push_back(text);
            }
        }
        return {};
    }

    const Process* process_for(std::int64_t key) const {
        auto at = processes_.find(key);
        return at != processes_.end() ? &at->second : nullptr;
    }

    LaneId stream_lane(const Process& process, std::int64_t device, std::int64_t stream) {
        auto [at, added] = stream_lanes_.try_emplace({process.key, device, stream});
        if (added) {
            at->second = writer_.add_lane(
                process.rank, LaneKind::gpu_stream,
                "stream " + std::to_string(stream) + " (device " + std::to_string(device) + ")",
                stream);
        }
        return at->second;
    }

    LaneId thread_lane(const Process& process, std::int64_t global_tid) {
        auto [at, added] = thread_lanes_.try_emplace(global_tid);
        if (added) {
            if (!thread_names_loaded_) {
                load_thread_names();
            }
            const std::int64_t tid = tid_of(global_tid);
            auto name = thread_names_.find(global_tid);
            at->second = writer_.add_lane(process.rank, LaneKind::host_thread,
                                          name != thread_names_.end() && !name->second.empty()
                                              ? name->second
                                              : "thread " + std::to_string(tid),
                                          tid);
        }
        return at->second;
    }

    void load_thread_names() {
        thread_names_loaded_ = true;
        if (!source_.has_column("ThreadNames", "globalTid") ||
            !source_.has_column("ThreadNames", "nameId")) {
            return;
        }
        // A failure here only loses names.
        (void)source_.query("SELECT globalTid, nameId FROM ThreadNames", [&](sqlite3_stmt* stmt) {
            thread_names_[int_or(stmt, 0, 0)] = name_at(stmt, 1);
            return true;
        });
    }

    // Reads one GPU activity table; `make` fills the event's kind, name, category and bytes.
    template <typename Make>
    Status read_gpu_table(const std::string& table, const std::vector<std::string>& extra,
                          Make&& make) {
        if (!readable(table, {"start", "end", "globalPid"})) {
            return {};
        }
        auto column = [&](const std::string& name) {
            return source_.has_column(table, name) ? "\"" + name + "\"" : std::string("NULL");
        };
        std::string sql = "SELECT rowid, start, \"end\", globalPid, " + column("deviceId") + ", " +
                          column("streamId") + ", " + column("correlationId");
        for (const auto& name : extra) {
            sql += ", " + column(name);
        }
        sql += " FROM " + table;
        std::int64_t rows = 0;
        auto status = source_.query(sql, [&](sqlite3_stmt* stmt) {
            if ((++rows & 4095) == 0 && cancelled())
                return false;
            const std::int64_t row = sqlite3_column_int64(stmt, 0);
            Event event;
            event.start_ns = int_or(stmt, 1, -1);
            event.end_ns = int_or(stmt, 2, -1);
            const std::int64_t device = int_or(stmt, 4, 0), stream = int_or(stmt, 5, 0);
            event.correlation = int_or(stmt, 6, -1);
            make(stmt, 7, event);
            const Process* process = process_for(process_key(int_or(stmt, 3, 0)));
            // Built only for a skipped row: formatting it for every row was a tenth of a read.
            auto record = [&] {
                return "start=" + std::to_string(event.start_ns) +
                       " end=" + std::to_string(event.end_ns) +
                       " device=" + std::to_string(device) + " stream=" + std::to_string(stream) +
                       " name=" + std::string(last_name_);
            };
            if (sqlite3_column_type(stmt, 1) == SQLITE_NULL ||
                sqlite3_column_type(stmt, 2) == SQLITE_NULL) {
                skip(table, row, "no start or end time", record());
            } else if (event.end_ns < event.start_ns) {
                skip(table, row, "negative duration: end before start", record());
            } else if (process == nullptr) {
                skip(table, row, "no process", record());
            } else {
                event.lane = stream_lane(*process, device, stream);
                add_event(event);
            }
            return true;
        });
        if (!status)
            return status;
        if (cancelled())
            return Error{ErrorCode::cancelled, "import cancelled"};
        return {};
    }

    StringId intern(std::string name) {
        last_name_ = std::move(name);
        return writer_.intern(last_name_);
    }

    // A kernel's kind and category from its (full) name, kept per distinct name: the same few
    // names repeat for every launch, and matching them case-blind was a sixth of a read.
    std::pair<EventKind, Category> kernel_class(const std::string& probe) {
        if (auto known = kernel_classes_.find(probe); known != kernel_classes_.end())
            return known->second;
        std::pair<EventKind, Category> found{EventKind::collective, Category::communication};
        if (!contains_nocase(probe, "nccl")) {
            found = {EventKind::kernel, contains_nocase(probe, "flash") ||
                                                contains_nocase(probe, "fmha") ||
                                                contains_nocase(probe, "attention")
                                            ? Category::attention
                                            : Category::compute};
        }
        if (kernel_classes_.size() < (1u << 16))
            kernel_classes_.emplace(probe, found);
        return found;
    }

    // Events go to the sink in batches: one call (one lock, for the TraceWriter) per 4096.
    void add_event(const Event& event) {
        batch_.push_back(event);
        if (batch_.size() >= 4096)
            flush_events();
    }
    void flush_events() {
        if (!batch_.empty())
            writer_.add_events(batch_.data(), batch_.size());
        batch_.clear();
    }

    Status read_kernels() {
        const std::string table = "CUPTI_ACTIVITY_KIND_KERNEL";
        return read_gpu_table(table, {"shortName", "demangledName", "mangledName"},
                              [&](sqlite3_stmt* stmt, int first, Event& event) {
                                  std::string name;
                                  for (int i = 0; i < 3 && name.empty(); ++i) {
                                      name = name_at(stmt, first + i);
                                  }
                                  const std::string full = name_at(stmt, first + 1);
                                  if (name.empty())
                                      name = "kernel";
                                  const auto [kind, category] =
                                      kernel_class(full.empty() ? name : full);
                                  event.kind = kind;
                                  event.category = category;
                                  event.name = intern(name);
                              });
    }

    Status read_memcpy() {
        return read_gpu_table(
            "CUPTI_ACTIVITY_KIND_MEMCPY", {"bytes", "copyKind", "srcKind", "dstKind"},
            [&](sqlite3_stmt* stmt, int first, Event& event) {
                event.kind = EventKind::memcpy;
                event.bytes = int_or(stmt, first, -1);
                const std::int64_t kind = int_or(stmt, first + 1, -1);
                event.copy_kind =
                    kind >= 1 && kind <= 10 ? static_cast<CopyKind>(kind) : CopyKind::none;
                auto memory = [&](int column) {
                    const std::int64_t value = int_or(stmt, column, -1);
                    return value >= 0 && value <= 7 ? static_cast<MemoryKind>(value)
                                                    : MemoryKind::none;
                };
                event.src_memory = memory(first + 2);
                event.dst_memory = memory(first + 3);
                event.category =
                    crosses_host_and_device(event.copy_kind) ? Category::offload : Category::memory;
                event.name = intern(std::string(copy_label(kind)));
            });
    }

    Status read_memset() {
        return read_gpu_table("CUPTI_ACTIVITY_KIND_MEMSET", {"bytes"},
                              [&](sqlite3_stmt* stmt, int first, Event& event) {
                                  event.kind = EventKind::memset;
                                  event.category = Category::memory;
                                  event.bytes = int_or(stmt, first, -1);
                                  event.name = intern("Memset");
                              });
    }

    Status read_runtime() {
        const std::string table = "CUPTI_ACTIVITY_KIND_RUNTIME";
        if (!readable(table, {"start", "end", "globalTid"})) {
            return {};
        }
        const std::string sql =
            "SELECT rowid, start, \"end\", globalTid, " +
            std::string(source_.has_column(table, "correlationId") ? "correlationId" : "NULL") +
            ", " + (source_.has_column(table, "nameId") ? "nameId" : "NULL") + " FROM " + table;
        std::int64_t rows = 0;
        auto status = source_.query(sql, [&](sqlite3_stmt* stmt) {
            if ((++rows & 4095) == 0 && cancelled())
                return false;
            const std::int64_t row = sqlite3_column_int64(stmt, 0);
            const std::int64_t global_tid = int_or(stmt, 3, 0);
            Event event;
            event.start_ns = int_or(stmt, 1, -1);
            event.end_ns = int_or(stmt, 2, -1);
            event.correlation = int_or(stmt, 4, -1);
            std::string name = api_name(name_at(stmt, 5));
            if (name.empty())
                name = "CUDA runtime call";
            event.kind =
                name.find("Synchronize") != std::string::npos ? EventKind::sync : EventKind::api;
            event.category = Category::runtime;
            auto record = [&] {
                return "start=" + std::to_string(event.start_ns) +
                       " end=" + std::to_string(event.end_ns) +
                       " globalTid=" + std::to_string(global_tid) + " name=" + name;
            };
            const Process* process = process_for(process_key(global_tid));
            if (sqlite3_column_type(stmt, 1) == SQLITE_NULL ||
                sqlite3_column_type(stmt, 2) == SQLITE_NULL) {
                skip(table, row, "no start or end time", record());
            } else if (event.end_ns < event.start_ns) {
                skip(table, row, "negative duration: end before start", record());
            } else if (process == nullptr) {
                skip(table, row, "no process", record());
            } else {
                event.name = writer_.intern(name);
                event.lane = thread_lane(*process, global_tid);
                add_event(event);
                if (megatron_place(process->key) != nullptr) {
                    std::int64_t& last = last_call_end_[global_tid];
                    last = std::max(last, event.end_ns);
                }
            }
            return true;
        });
        if (!status)
            return status;
        if (cancelled())
            return Error{ErrorCode::cancelled, "import cancelled"};
        return {};
    }

    Status read_nvtx() {
        const std::string table = "NVTX_EVENTS";
        if (!readable(table, {"start", "eventType", "globalTid"})) {
            return {};
        }
        auto column = [&](const char* name) {
            return source_.has_column(table, name) ? "\"" + std::string(name) + "\""
                                                   : std::string("NULL");
        };
        const std::string sql =
            "SELECT rowid, start, " + column("end") + ", eventType, globalTid, " + column("text") +
            ", " + column("textId") + ", " + column("domainId") + ", " + column("category") + ", " +
            column("int64Value") + ", " + column("uint64Value") +
            " FROM NVTX_EVENTS WHERE eventType IN (" + nvtx_event_types() + ")";
        std::int64_t rows = 0;
        auto status = source_.query(sql, [&](sqlite3_stmt* stmt) {
            if ((++rows & 4095) == 0 && cancelled())
                return false;
            const std::int64_t row = sqlite3_column_int64(stmt, 0);
            const std::int64_t type = sqlite3_column_int64(stmt, 3);
            const std::int64_t global_tid = int_or(stmt, 4, 0);
            std::string message = text_of(stmt, 5);
            if (message.empty() && sqlite3_column_type(stmt, 6) != SQLITE_NULL) {
                message = string(sqlite3_column_int64(stmt, 6));
            }
            const std::int64_t domain_id = int_or(stmt, 7, 0);
            auto domain = domains_.find(domain_id);
            const std::string domain_name =
                domain != domains_.end() ? domain->second : std::string();
            Event event;
            event.start_ns = int_or(stmt, 1, -1);
            event.end_ns = type == kNvtxMark ? event.start_ns : int_or(stmt, 2, -1);
            event.kind = type == kNvtxMark ? EventKind::mark : EventKind::range;
            const std::string record = "start=" + std::to_string(event.start_ns) +
                                       " end=" + std::to_string(event.end_ns) +
                                       " eventType=" + std::to_string(type) +
                                       " domain=" + domain_name + " text=" + message;
            const Process* process = process_for(process_key(global_tid));
            if (sqlite3_column_type(stmt, 1) == SQLITE_NULL ||
                (type != kNvtxMark && sqlite3_column_type(stmt, 2) == SQLITE_NULL)) {
                skip(table, row, "range without an end (still open when the capture stopped?)",
                     record);
                return true;
            }
            if (event.end_ns < event.start_ns) {
                skip(table, row, "negative duration: end before start", record);
                return true;
            }
            if (process == nullptr) {
                skip(table, row, "no process", record);
                return true;
            }
            if (const auto calls = megatron_calls_.find(process->key);
                calls != megatron_calls_.end() && calls->second.global_tid == global_tid &&
                megatron_place(process->key) != nullptr &&
                megatron::parse_p2p_range(message).has_value()) {
                return true;  // a hand-over, added with the passes (add_megatron_structure)
            }
            if (domain_name == "fulcrum") {
                if (!fulcrum_event(stmt, *process, message, event, row, record)) {
                    return true;  // a metadata mark, consumed
                }
            } else {
                event.name = writer_.intern(message.empty() ? std::string("(unnamed)") : message);
                if (!domain_name.empty()) {
                    event.args = writer_.intern(domain_args(domain_name));
                }
            }
            event.lane = thread_lane(*process, global_tid);
            add_event(event);
            return true;
        });
        if (!status)
            return status;
        if (cancelled())
            return Error{ErrorCode::cancelled, "import cancelled"};
        return {};
    }

    // An event of the `fulcrum` domain, as the collector maps it (docs/annotations.md).
    // Returns false for a metadata mark that becomes no event.
    bool fulcrum_event(sqlite3_stmt* stmt, const Process& process, const std::string& message,
                       Event& event, std::int64_t row, const std::string& record) {
        if (event.kind == EventKind::mark) {
            const auto mark = split_mark_message(message);
            if (mark.name == kRankMark) {
                return false;
            }
            const Result<bool> recorded = record_metadata_mark(mark, process.rank, writer_);
            if (!recorded) {
                skip("NVTX_EVENTS", row, recorded.error().message, record);
                return false;
            }
            if (*recorded) {
                return false;  // consumed: run.config or workload rows
            }
            event.name = writer_.intern(mark.name);
            return true;
        }
        const auto annotation = parse_range_message(message);
        event.name = writer_.intern(annotation.name);
        event.step = annotation.step;
        event.microbatch = annotation.microbatch;
        event.stage = annotation.stage;
        event.phase = annotation.phase;
        event.bytes = annotation.bytes;
        if (event.bytes < 0) {
            event.bytes = int_or(stmt, 9, int_or(stmt, 10, -1));
        }
        if (!annotation.args_json.empty()) {
            event.args = writer_.intern(annotation.args_json);
        }
        const std::int64_t category = int_or(stmt, 8, 0);
        event.category = category > 0 && category < 256
                             ? category_from_nvtx(static_cast<std::uint32_t>(category))
                             : Category::other;
        if (event.category == Category::communication) {
            event.kind = EventKind::collective;
        }
        return true;
    }

    // The place the job's survey gave the process, if any.
    const structure::Coordinates* megatron_place(std::int64_t key) const {
        if (!job_.found)
            return nullptr;
        const auto at = job_.places.find({options_.input_index, key});
        return at != job_.places.end() ? &at->second : nullptr;
    }

    // Each placed process's schedule thread: its steps (a range from the step's start to the
    // next step's, the last to the thread's last CUDA call), its passes and its hand-overs as
    // fulcrum-train writes them (docs/annotations.md), numbered from step 1 in the order the
    // thread ran them. A step whose calls are not in its schedule's order keeps them as the
    // ranges they were.
    void add_megatron_structure() {
        if (!job_.problem.empty() && !megatron_calls_.empty()) {
            log_.note("structure: " + job_.problem);
        }
        bool placed_any = false;
        for (const auto& [key, process] : processes_) {
            const structure::Coordinates* place = megatron_place(key);
            const auto calls = megatron_calls_.find(key);
            if (place == nullptr || calls == megatron_calls_.end())
                continue;
            placed_any = true;
            const ProcessCalls& found = calls->second;
            const LaneId lane = thread_lane(process, found.global_tid);
            const megatron::MegatronThread thread =
                megatron::megatron_passes(found.calls, found.phases);
            std::int64_t passes = 0;
            std::int32_t unordered = 0;
            std::size_t call_index = 0;
            for (std::size_t i = 0; i < thread.steps.size(); ++i) {
                const megatron::MegatronStep& step = thread.steps[i];
                const std::int32_t number = static_cast<std::int32_t>(i) + 1;
                Event window;
                window.lane = lane;
                window.kind = EventKind::range;
                window.category = Category::schedule;
                window.name = intern(std::string(range_name::kStep));
                window.start_ns = step.start_ns;
                window.end_ns = i + 1 < thread.steps.size()
                                    ? thread.steps[i + 1].start_ns
                                    : std::max(step.end_ns, last_call_end_[found.global_tid]);
                window.step = number;
                window.args = intern(R"({"inferred_from":"Megatron-LM's hand-over ranges"})");
                add_event(window);
                unordered += step.consistent ? 0 : 1;
                for (const structure::RecoveredRange& handover : step.calls) {
                    const std::string& text = found.texts[call_index++];
                    Event event;
                    event.lane = lane;
                    event.start_ns = handover.start_ns;
                    event.end_ns = handover.end_ns;
                    event.kind = EventKind::range;
                    event.category = Category::other;
                    event.name = intern(text);
                    if (step.consistent) {
                        const std::int32_t chunk =
                            set_megatron_structure(event, handover, *place, number);
                        event.args =
                            intern(nlohmann::json({{"chunk", chunk}, {"nvtx_name", text}}).dump());
                    }
                    add_event(event);
                }
                if (!step.consistent)
                    continue;
                for (const structure::RecoveredRange& pass : step.passes) {
                    Event event;
                    event.lane = lane;
                    event.start_ns = pass.start_ns;
                    event.end_ns = pass.end_ns;
                    const std::int32_t chunk = set_megatron_structure(event, pass, *place, number);
                    event.args = intern(
                        nlohmann::json({{"chunk", chunk},
                                        {"recovered_from", "Megatron-LM's hand-over ranges"}})
                            .dump());
                    add_event(event);
                    ++passes;
                }
            }
            const bool interleaved = thread.schedule == megatron::MegatronSchedule::interleaved;
            log_.note(
                "structure: " + std::to_string(passes) + " passes of rank " +
                std::to_string(process.rank) + " from Megatron-LM's pipeline hand-over " +
                (interleaved
                     ? std::string("ranges, in the order of its interleaved schedule (each pass "
                                   "between two calls, a forward before send_forward_recv_forward, "
                                   "a backward before send_backward_recv_backward; micro-batches "
                                   "and chunks by its schedule table; inferred)")
                     : std::string("ranges, in the order of its 1F1B schedule (a forward from the "
                                   "call that receives its activations to the one that sends them, "
                                   "a backward likewise with the gradients; micro-batches numbered "
                                   "in the order the stage ran them; inferred)")) +
                (unordered > 0 ? "; " + std::to_string(unordered) +
                                     " steps whose calls are not in that order left "
                                     "without passes"
                               : std::string()));
        }
        if (!placed_any)
            return;
        log_.note("structure: grid dp" + std::to_string(job_.grid.dp) + " tp" +
                  std::to_string(job_.grid.tp) + " pp" + std::to_string(job_.grid.pp) + " cp" +
                  std::to_string(job_.grid.cp) + ", from " + job_.rule);
        writer_.set_run_config(
            "{\"source\":\"nsys\",\"dp\":" + std::to_string(job_.grid.dp) +
            ",\"tp\":" + std::to_string(job_.grid.tp) + ",\"pp\":" + std::to_string(job_.grid.pp) +
            ",\"cp\":" + std::to_string(job_.grid.cp) + ",\"schedule\":\"" + job_.schedule +
            "\",\"microbatches\":" + std::to_string(job_.microbatches) +
            (job_.virtual_stages > 1 ? ",\"virtual_stages\":" + std::to_string(job_.virtual_stages)
                                     : std::string()) +
            "}");
    }

    // A pass or hand-over of a placed process as fulcrum-train writes it; returns its model
    // chunk. Under the interleaved schedule its ordinal becomes a micro-batch and a chunk.
    std::int32_t set_megatron_structure(Event& event, const structure::RecoveredRange& range,
                                        const structure::Coordinates& place, std::int32_t step) {
        const bool communication = structure::action_is_communication(range.kind);
        event.kind = communication ? EventKind::collective : EventKind::range;
        event.category = communication ? Category::communication : Category::compute;
        event.name = intern(std::string(structure::action_range_name(range.kind)));
        event.stage = static_cast<std::int16_t>(place.pp);
        event.microbatch = range.microbatch;
        event.phase = structure::action_phase(range.kind);
        event.step = step;
        std::int32_t chunk = 0;
        if (job_.virtual_stages > 1) {
            const auto at = megatron::interleaved_place(
                range.microbatch, event.phase == Phase::backward, job_.microbatches,
                job_.virtual_stages, job_.microbatch_group);
            if (at) {
                event.microbatch = at->first;
                chunk = at->second;
            }
        }
        return chunk;
    }

    Source& source_;
    TraceSink& writer_;
    std::vector<Event> batch_;
    std::unordered_map<std::string, std::pair<EventKind, Category>> kernel_classes_;
    const ImportFileOptions& options_;
    ImportLog log_;
    std::unordered_map<std::int64_t, std::string> strings_;
    std::map<std::int64_t, std::string> domains_;
    std::map<std::int64_t, Process> processes_;
    std::map<std::int64_t, RankMark> rank_marks_;
    std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, LaneId> stream_lanes_;
    std::unordered_map<std::int64_t, LaneId> thread_lanes_;
    std::unordered_map<std::int64_t, std::string> thread_names_;
    bool thread_names_loaded_ = false;
    std::string last_name_;
    // Megatron-LM's pipeline (megatron.h): the job's grid and this input's hand-overs, and the
    // end of each schedule thread's last CUDA call (the last step ends there).
    const JobStructure& job_;
    std::map<std::int64_t, ProcessCalls> megatron_calls_;
    std::unordered_map<std::int64_t, std::int64_t> last_call_end_;
};

class NsysImporter final : public Importer {
public:
    std::string_view name() const override { return "nsys-sqlite"; }
    std::string_view description() const override {
        return "Nsight Systems SQLite export (nsys export --type sqlite)";
    }

    // The head cannot show tables: any SQLite file that is not a Fulcrum run is a candidate;
    // import_file then checks for the export's tables.
    // A CUPTI activity row of an export is ~40 bytes with its share of the pages; runtime
    // calls and NVTX ranges are as small.
    bool sniff(std::string_view head) const override {
        static constexpr std::string_view kMagic{"SQLite format 3\0", 16};
        if (head.substr(0, kMagic.size()) != kMagic) {
            return false;
        }
        if (head.size() >= 72) {
            const auto* bytes = reinterpret_cast<const unsigned char*>(head.data()) + 68;
            const std::uint32_t id = (std::uint32_t(bytes[0]) << 24) |
                                     (std::uint32_t(bytes[1]) << 16) |
                                     (std::uint32_t(bytes[2]) << 8) | std::uint32_t(bytes[3]);
            if (id == kFulcrumApplicationId) {
                return false;
            }
        }
        return true;
    }

    Status read(const ImportInput& input, TraceSink& sink,
                const ImportFileOptions& options) const override {
        Source source(input);
        if (auto status = source.open(); !status) {
            return status.error();
        }
        bool activity = source.has_table("NVTX_EVENTS");
        for (const char* table : {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                                  "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME"}) {
            activity = activity || source.has_table(table);
        }
        if (!source.has_table("StringIds") || !activity) {
            return Error{ErrorCode::invalid_input,
                         "'" + input.path +
                             "' is an SQLite database but not an Nsight Systems export (it has no "
                             "StringIds table with CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS tables)"};
        }
        JobStructure alone;
        const JobStructure* job = options.job;
        if (job == nullptr) {
            auto surveyed = survey_megatron({input}, options.cancel, options.input_index);
            if (!surveyed) {
                return surveyed.error();
            }
            alone = std::move(*surveyed);
            job = &alone;
        }
        Import import(source, sink, options, std::filesystem::path(input.path).filename().string(),
                      *job);
        return import.run(input.path);
    }

    Result<JobStructure> survey(const std::vector<ImportInput>& inputs,
                                const std::atomic<bool>* cancel) const override {
        return survey_megatron(inputs, cancel);
    }
};

}  // namespace

std::unique_ptr<Importer> make_nsys_importer() {
    return std::make_unique<NsysImporter>();
}

}  // namespace fulcrum::importer
