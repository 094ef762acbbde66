// Re-running a run with another balancer: the pure part. Rebuilding the engine's command
// line from the one `fulcrum capture` recorded, finding the tools, choosing where the new
// run goes. No widgets, no processes, so it is tested table by table.
#pragma once

#include <QString>
#include <QStringList>

#include "core/plan/planner.h"
#include "views/common/opened_run.h"

namespace fulcrum::ui {

// What the user picks; an empty field keeps the run's own setting.
struct RerunChoice {
    QString balancer = {};  // fixed, ilp, wlb
    QString cp_shard = {};  // contiguous, zigzag, per-doc, adaptive (only meaningful when cp > 1)
    // gpipe, 1f1b, interleaved (with --virtual-stages, 2 unless the run gave more), zb-h1
    // (only meaningful when pp > 1)
    QString schedule = {};
    // One epoch (--epochs 1 instead of --steps): every document once, so runs with other
    // balancers train the same documents and tokens/s compares them.
    bool same_documents = false;
    // A layout from `fulcrum plan` (candidate_rerun): the engine's layout options (--dp, --tp,
    // --pp, --cp, --micro-batches, --recompute, and --virtual-stages, --stage-layers,
    // --sequence-parallel when the candidate has them) replacing the recorded ones, and the
    // ranks mpirun starts. Empty and 0 keep the run's.
    QStringList layout = {};
    int world = 0;
};

QStringList balancer_names();
QStringList cp_shard_names();
QStringList schedule_names();

// Splits a command line that `fulcrum capture` recorded with POSIX shell quoting
// (launch::shell_quote: plain words bare, others in single quotes with '\'' for a quote).
QStringList split_shell_words(const QString& command);

// Sets `--option value`: replaces the value of every `--option value` / `--option=value`
// already there, or appends the pair when the option is missing.
QStringList with_option(QStringList argv, const QString& option, const QString& value);
// Drops every `--option value` / `--option=value`.
QStringList without_option(QStringList argv, const QString& option);

// Index of the fulcrum-train word in a recorded command (after mpirun/srun and their
// options), or -1.
int engine_word(const QStringList& argv);

// The engine for a recorded path: the recorded one when it exists (relative paths against
// the current directory, since capture does not record its working directory), else the one
// of this build next to the GUI (`app_dir`/../../engine), else PATH. Empty when none.
QString locate_engine(const QString& recorded, const QString& app_dir);
// `fulcrum` of this build (`app_dir`/..), else PATH. Empty when none.
QString locate_fulcrum(const QString& app_dir);

// The engine command for `choice`: the recorded words with --balancer replaced, --cp-shard
// only when cp > 1 and --schedule only when pp > 1 (interleaved gets --virtual-stages 2 when
// the run gave none; another schedule drops it), --steps replaced by --epochs 1 for the same
// documents, and the engine word replaced by `engine` when it is not empty.
QStringList rerun_argv(const QStringList& recorded, const RerunChoice& choice, int pp, int cp,
                       const QString& engine = {});

// Whether `run` can be captured again on this machine, and if not, why (shown in the
// dialog next to "Simulate instead").
struct RerunPlan {
    bool capture_here = false;
    QString why_not;   // empty when capture_here
    QString engine;    // the located fulcrum-train
    QStringList argv;  // the recorded command, split
};
RerunPlan plan_rerun(const views::OpenedRun& run, const QString& app_dir,
                     const QString& local_host);

// Re-running a `fulcrum plan` candidate (the Plan tab) with the open run's model and documents:
// its layout, schedule, knobs, balancer and sharding over the run's recorded command. It runs
// here only when the run can be captured again here (`plan`) and the candidate needs no more
// ranks than the run had (`recorded_world`, what this machine ran); else `why_not` says why.
struct CandidateRerun {
    RerunChoice choice;
    QString why_not;  // empty when it can run here
};
CandidateRerun candidate_rerun(const plan::Candidate& candidate, const RerunPlan& plan,
                               int recorded_world);

// A path that does not exist yet, next to the run's folder:
// `<run folder>/../<stem><suffix>`, then `<stem><suffix>-2`... (the suffix may carry an
// extension: "-sim-wlb.fulcrum"). Falls back to the temp folder when that is not writable.
QString unique_output_path(const QString& run_path, const QString& stem, const QString& suffix);

// `fulcrum capture -o OUT -- ENGINE ARGV...`
QStringList capture_arguments(const QString& out_dir, const QStringList& engine_argv);
// `fulcrum simulate --calibrate RUN --balancer B [--cp-shard S] [--schedule X] [--epochs 1]
// --progress -o OUT`
QStringList simulate_arguments(const QString& run_path, const RerunChoice& choice, int pp, int cp,
                               const QString& out_file);

// Progress of a re-run, from one line of the tool's output: the engine's "step N | ..." lines
// (0-based steps out of `steps`) or simulate --progress's "label NN%". -1 when the line says
// nothing about progress.
double progress_from_line(const QString& line, int steps);

}  // namespace fulcrum::ui
