#!/usr/bin/env python3
"""Nsight Systems SQLite exports of two Megatron-LM jobs, built from what Megatron-LM emits.

Megatron-LM needs CUDA and a cluster, so these jobs are not run: they are played. Each rank's
calls follow forward_backward_pipelining_without_interleaving (1F1B) or
forward_backward_pipelining_with_interleaving with overlap_p2p_comm (megatron/core/
pipeline_parallel/schedules.py, NVIDIA/Megatron-LM at d98e8a64) call for call, and each
hand-over is the NVTX range `--nvtx-ranges` records for it (p2p_communication.py,
`@nvtx_decorator()`: the module's path and the function's name), on every stage, also where the
call moves nothing (the first stage's recv_forward, the last stage's send_forward); the
interleaved schedule's phases are ranges too (`nvtx_range_push(suffix="warmup")` ...). Passes
carry no range, as in Megatron-LM; their kernels (a GEMM, flash attention, an elementwise
kernel) are launched by cudaLaunchKernel records correlated with them, each call that moves a
tensor launches NCCL's SendRecv kernel, as batch_isend_irecv does, and each step ends with the
DP gradient all-reduce, the optimizer's kernel and the loss read back (the host waits).

1F1B: a message is delivered when both its sending and its receiving call have started, plus a
transfer time; a call ends when all of its messages are delivered; the host launches each item
40 us before the GPU starts it, a call's range lasting 8 us, within the 10 us the shortest call
takes on the GPU, so no range holds the next item's launches. Interleaved: each call posts its
pass's output and the next pass's receive without waiting; a pass starts on its stream when its
input has arrived; the host runs ahead of the GPU until the step's end. Passes take their
micro-batch's time (documents of skewed lengths: each micro-batch its own cost, the two DP
replicas different ones; the last stage 15% more, for the loss head).

Writes rank0.sqlite ... rank7.sqlite (1F1B, pp 4 x dp 2, Megatron-LM's default rank order
tp-cp-dp-pp: rank = dp + 2 * stage; 8 micro-batches; 2 steps), job.sqlite (the same eight
processes in one export, as `nsys profile torchrun ...` writes it; process k is rank k),
interleaved-rank0.sqlite ... interleaved-rank3.sqlite (pp 4, 2 chunks a stage, 8 micro-batches,
2 steps) and truth.json: per job the schedule, the grid, each rank's stage and, per step, its
passes in the order it ran them with their micro-batch, chunk and the GPU time each spans (from
the first kernel launched inside its recovered host window to the last one's end).

    python3 tests/data/megatron/make_nsys_megatron.py tests/data/megatron
"""
import json
import os
import sqlite3
import sys

PP, DP, MICROBATCHES, STEPS = 4, 2, 8, 2
US = 1000  # ns
MODULE = "megatron.core.pipeline_parallel.p2p_communication."
# nvtx_range_push(suffix=...) in forward_backward_pipelining_with_interleaving: the caller's path.
SCHEDULES = "megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_with_interleaving."
# Relative cost of each micro-batch (documents of skewed lengths), per DP replica.
COST = [[1.0, 1.6, 0.8, 1.2, 2.0, 0.9, 1.1, 1.4], [1.3, 0.7, 1.5, 0.9, 1.0, 1.8, 0.8, 1.2]]
FORWARD_US = 900
LAST_STAGE_EXTRA = 1.15  # the loss head
TRANSFER_US = 60
HOST_LEAD_US = 40
CALL_MIN_US = 10


def program(stage, step):
    """One step's items on `stage`, in Megatron-LM's order: ('call', name, sends, receives) with
    messages (kind, micro-batch, from stage, to stage), and ('F'|'B', micro-batch)."""
    first, last = stage == 0, stage == PP - 1
    warmup = min(PP - stage - 1, MICROBATCHES)
    remaining = MICROBATCHES - warmup

    def act(mb, frm):
        return ("act", step, mb, frm, frm + 1)

    def grad(mb, frm):
        return ("grad", step, mb, frm, frm - 1)

    items = []

    def call(name, sends=(), receives=()):
        items.append(("call", name, list(sends), list(receives)))

    for i in range(warmup):
        call("recv_forward", receives=[] if first else [act(i, stage - 1)])
        items.append(("F", i))
        call("send_forward", sends=[] if last else [act(i, stage)])
    if remaining > 0:
        call("recv_forward", receives=[] if first else [act(warmup, stage - 1)])
    for i in range(remaining):
        items.append(("F", warmup + i))
        call("send_forward_recv_backward",
             sends=[] if last else [act(warmup + i, stage)],
             receives=[] if last else [grad(i, stage + 1)])
        items.append(("B", i))
        if i == remaining - 1:
            call("send_backward", sends=[] if first else [grad(i, stage)])
        else:
            call("send_backward_recv_forward",
                 sends=[] if first else [grad(i, stage)],
                 receives=[] if first else [act(warmup + i + 1, stage - 1)])
    for i in range(warmup):
        mb = remaining + i
        call("recv_backward", receives=[] if last else [grad(mb, stage + 1)])
        items.append(("B", mb))
        call("send_backward", sends=[] if first else [grad(mb, stage)])
    items.append(("allreduce",))
    items.append(("optimizer",))
    return items


def pass_us(kind, mb, stage, dp):
    base = FORWARD_US * COST[dp][mb] * (LAST_STAGE_EXTRA if stage == PP - 1 else 1.0)
    return int(base * (2 if kind == "B" else 1))


def play():
    """Plays every rank's steps; returns rank -> list of (item, gpu start, gpu end, step)."""
    ranks = [(dp, stage) for stage in range(PP) for dp in range(DP)]  # rank = dp + DP * stage
    programs = {}
    for dp, stage in ranks:
        items = []
        for step in range(STEPS):
            items += [(item, step) for item in program(stage, step)]
        programs[(dp, stage)] = items
    clock = {key: 1_000_000 * US for key in ranks}  # each stream's time
    at = {key: 0 for key in ranks}
    started = {}  # (dp, message) -> call start
    done = {key: [] for key in ranks}
    pending_start = {}
    progress = True
    while progress:
        progress = False
        for key in ranks:
            dp, stage = key
            while at[key] < len(programs[key]):
                (item, step) = programs[key][at[key]]
                if at[key] > 0 and programs[key][at[key] - 1][1] != step and key not in pending_start:
                    clock[key] += 2000 * US  # the next batch's data
                kind = item[0]
                if kind == "call":
                    start = pending_start.setdefault(key, clock[key])
                    messages = item[2] + item[3]
                    for message in messages:
                        started[(dp, message, "send" if message in item[2] else "recv")] = start
                    delivered = []
                    for message in messages:
                        other = "recv" if message in item[2] else "send"
                        if (dp, message, other) not in started:
                            break
                        delivered.append(max(start, started[(dp, message, other)]) + TRANSFER_US * US)
                    else:
                        end = max([start + CALL_MIN_US * US] + delivered)
                        done[key].append((item, start, end, step))
                        clock[key] = end
                        del pending_start[key]
                        at[key] += 1
                        progress = True
                        continue
                    break  # waits on a neighbour
                if kind in ("F", "B"):
                    duration = pass_us(kind, item[1], stage, dp) * US
                elif kind == "allreduce":
                    duration = 400 * US
                else:
                    duration = 300 * US
                done[key].append((item, clock[key], clock[key] + duration, step))
                clock[key] += duration
                at[key] += 1
                progress = True
    for key in ranks:
        if at[key] != len(programs[key]):
            sys.exit(f"the play deadlocked at rank {key}")
    return {dp + DP * stage: done[(dp, stage)] for dp, stage in ranks}


SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
CREATE TABLE TARGET_INFO_GPU (id INTEGER NOT NULL, name TEXT, busLocation TEXT);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT, name TEXT, nameEnum INTEGER, value TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER,
  demangledName INTEGER, shortName INTEGER, mangledName INTEGER, gridX INTEGER, blockX INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
  eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
  rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
  endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value INTEGER,
  int64Value INTEGER, doubleValue REAL, jsonText TEXT);
"""

KERNELS = {
    "gemm": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "attention": "flash_fwd_kernel",
    "attention_bwd": "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel",
    "elementwise": "vectorized_elementwise_kernel",
    "sendrecv": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
    "allreduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "optimizer": "multi_tensor_apply_kernel",
}


class Export:
    """One nsys export being written: its tables, and its string ids."""

    def __init__(self, path):
        if os.path.exists(path):
            os.remove(path)
        self.db = sqlite3.connect(path)
        self.db.execute("PRAGMA page_size = 1024")
        self.db.executescript(SCHEMA)
        self.strings = {}
        self.db.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100 80GB HBM3', '0000:18:00.0')")
        self.db.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1764547200000000000, 'x', 'y')")
        self.db.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (0, '', 'Hostname', 0, 'node0')")

    def sid(self, text):
        if text not in self.strings:
            self.strings[text] = len(self.strings) + 1
            self.db.execute("INSERT INTO StringIds VALUES (?, ?)", (self.strings[text], text))
        return self.strings[text]

    def close(self):
        self.db.commit()
        self.db.execute("VACUUM")
        self.db.close()


def write_rank(export, rank, played):
    db, sid = export.db, export.sid
    pid = 4100 + rank
    gpid = pid << 24
    main = gpid + pid
    db.execute("INSERT INTO PROCESSES VALUES (?, ?, 'python')", (gpid, pid))
    db.execute("INSERT INTO ThreadNames VALUES (?, 0, ?)", (sid("pt_main_thread"), main))
    launch = sid("cudaLaunchKernel_v7000")
    correlation = [rank * 100000]
    compute_stream, comm_stream = 7, 20

    def kernel(name, start, end, stream, host_at):
        correlation[0] += 1
        c = correlation[0]
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, ?, 0)",
                   (host_at, host_at + 4 * US, main, c, launch))
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?, 1, 128)",
                   (start, end, rank, stream, c, gpid, sid(KERNELS[name]), sid(KERNELS[name]),
                    sid(KERNELS[name])))

    for entry in played:
        item, start, end = entry[0], entry[1], entry[2]
        host = entry[4] if len(entry) > 4 else start - HOST_LEAD_US * US
        kind = item[0]
        if kind == "phase":
            db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) "
                       "VALUES (?, ?, 59, ?, ?)", (start, end, SCHEDULES + item[1], main))
        elif kind == "call":
            db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) "
                       "VALUES (?, ?, 59, ?, ?)",
                       (host, host + 8 * US, MODULE + item[1], main))
            if item[2] or item[3]:
                kernel("sendrecv", start, end, comm_stream, host + 2 * US)
        elif kind in ("F", "B"):
            length = end - start
            gemm_end = start + length * 6 // 10
            attention_end = start + length * 9 // 10
            kernel("gemm", start, gemm_end, compute_stream, host + 5 * US)
            kernel("attention" if kind == "F" else "attention_bwd", gemm_end, attention_end,
                   compute_stream, host + 10 * US)
            kernel("elementwise", attention_end, end, compute_stream, host + 15 * US)
        elif kind == "allreduce":
            kernel("allreduce", start, end, comm_stream, host + 5 * US)
        else:
            kernel("optimizer", start, end, compute_stream, host + 5 * US)
            # The step ends reading its loss back (`.item()`): the host waits for the GPU.
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, ?, 0)",
                       (host + 10 * US, max(end, host + 20 * US), main, None,
                        sid("cudaStreamSynchronize_v3020")))


def truth_of(played_by_rank):
    ranks = {}
    for rank, played in sorted(played_by_rank.items()):
        steps = [[] for _ in range(STEPS)]
        # A recovered pass's host window runs from the call that feeds it to the next call, so
        # its GPU time runs from the feeding call's kernel (if it moved anything) to the pass's end.
        for i, (item, start, end, step) in enumerate(played):
            if item[0] in ("F", "B"):
                feeding = played[i - 1]
                moved = feeding[0][2] or feeding[0][3]
                steps[step].append(["forward" if item[0] == "F" else "backward", item[1], 0,
                                    feeding[1] if moved else start, end])
        ranks[str(rank)] = {"stage": rank // DP, "dp": rank % DP, "steps": steps}
    return {"schedule": "1f1b", "pp": PP, "dp": DP, "virtual_stages": 1,
            "microbatches": MICROBATCHES, "steps": STEPS, "megatron_commit": "d98e8a64",
            "files": [f"rank{r}.sqlite" for r in range(PP * DP)], "ranks": ranks}


# The interleaved job: pp 4, 2 model chunks a stage, 8 micro-batches in Megatron-LM's default
# groups of pp, 2 steps, one rank a stage, with overlap_p2p_comm (Megatron-LM's default): each
# pass is followed by one call that posts its output and the next pass's receive without
# waiting, so a pass waits on its stream for its input, and the host runs ahead of the GPU
# until the step's end.
IPP, ICHUNKS, IMICROBATCHES = 4, 2, 8
IGROUP = IPP


def schedule_table(microbatches, chunks, group):
    """Megatron-LM's get_schedule_table: the (micro-batch, chunk) of each forward in order."""
    table = []
    for first in range(0, microbatches, group):
        last = microbatches if first + group >= microbatches else first + group
        table += [(mb, chunk) for chunk in range(chunks) for mb in range(first, last)]
    return table


def interleaved_program(stage, step):
    """One step's items on `stage` in the order of forward_backward_pipelining_with_interleaving
    with overlap_p2p_comm: ('phase', name, 'begin'|'end'), ('F'|'B', ordinal, micro-batch,
    chunk, the messages it waits for), ('call', name, sends, receives) with messages (kind,
    step, micro-batch, virtual stage of the receiver)."""
    total = IMICROBATCHES * ICHUNKS
    warmup = min(2 * (IPP - stage - 1) + (ICHUNKS - 1) * IGROUP, total)
    remaining = total - warmup
    table = schedule_table(IMICROBATCHES, ICHUNKS, IGROUP)
    last_virtual = IPP * ICHUNKS - 1

    def needs(kind, mb, chunk):  # the message a pass waits for, if any
        virtual = chunk * IPP + stage
        if kind == "F":
            return [("act", step, mb, virtual)] if virtual > 0 else []
        return [("grad", step, mb, virtual)] if virtual < last_virtual else []

    def forward(k):
        mb, chunk = table[k]
        return ("F", k, mb, chunk, needs("F", mb, chunk))

    def backward(k):
        mb, chunk = table[k]
        return ("B", k, mb, ICHUNKS - 1 - chunk, needs("B", mb, ICHUNKS - 1 - chunk))

    def makes(p):  # the message a pass's output is
        virtual = p[3] * IPP + stage
        if p[0] == "F":
            return [("act", step, p[2], virtual + 1)] if virtual < last_virtual else []
        return [("grad", step, p[2], virtual - 1)] if virtual > 0 else []

    items = [("phase", "warmup", "begin"), ("call", "recv_forward", [], forward(0)[4])]
    for k in range(warmup):
        f = forward(k)
        after = forward(k + 1)[4] if k + 1 < total else []
        items += [f, ("call", "send_forward_recv_forward", makes(f), after)]
        if k == warmup - 1 and remaining > 0:
            items.append(("call", "send_backward_recv_backward", [], backward(0)[4]))
    items += [("phase", "warmup", "end"), ("phase", "steady", "begin")]
    for k in range(remaining):
        f, b = forward(warmup + k), backward(k)
        after_f = forward(warmup + k + 1)[4] if warmup + k + 1 < total else []
        items += [f, ("call", "send_forward_recv_forward", makes(f), after_f)]
        items += [b, ("call", "send_backward_recv_backward", makes(b), backward(k + 1)[4])]
    items += [("phase", "steady", "end"), ("phase", "cooldown", "begin")]
    for k in range(remaining, total):
        b = backward(k)
        after = backward(k + 1)[4] if k + 1 < total else []
        items += [b, ("call", "send_backward_recv_backward", makes(b), after)]
    items += [("phase", "cooldown", "end"), ("allreduce",), ("optimizer",)]
    return items


def play_interleaved():
    """Every stage's steps on the GPU and the host: rank -> [(item, gpu start, gpu end, step,
    host time)], phases as (('phase', name), host begin, host end, step, host begin)."""
    programs = {s: [(item, step) for step in range(STEPS) for item in interleaved_program(s, step)]
                for s in range(IPP)}
    host = {s: 1_000_000 * US for s in range(IPP)}
    compute = dict(host)
    comm = dict(host)
    last_pass_end = {s: 0 for s in range(IPP)}
    at = {s: 0 for s in range(IPP)}
    arrival = {}
    open_phase = {}
    done = {s: [] for s in range(IPP)}
    progress = True
    while progress:
        progress = False
        for s in range(IPP):
            while at[s] < len(programs[s]):
                item, step = programs[s][at[s]]
                kind = item[0]
                if kind == "phase":
                    if item[2] == "begin":
                        open_phase[s] = host[s]
                    else:
                        done[s].append((("phase", item[1]), open_phase[s], host[s], step,
                                        open_phase[s]))
                    host[s] += 1 * US
                elif kind in ("F", "B"):
                    wanted = item[4]
                    if any(m not in arrival for m in wanted):
                        break  # its input is not sent yet
                    start = max([compute[s], host[s] + 20 * US] + [arrival[m] for m in wanted])
                    duration = pass_us(kind, item[2], s, item[3]) * US
                    done[s].append((item, start, start + duration, step, host[s]))
                    compute[s] = last_pass_end[s] = start + duration
                    host[s] += 20 * US
                elif kind == "call":
                    start = max(comm[s], last_pass_end[s] if item[2] else 0, host[s] + 20 * US)
                    end = start + TRANSFER_US * US
                    for message in item[2]:
                        arrival[message] = end
                    if item[2] or item[3]:
                        comm[s] = end
                    done[s].append((item, start, end, step, host[s]))
                    host[s] += 10 * US
                else:
                    start = max(compute[s], comm[s])
                    duration = (400 if kind == "allreduce" else 300) * US
                    done[s].append((item, start, start + duration, step, host[s]))
                    compute[s] = comm[s] = start + duration
                    host[s] += 20 * US
                    if kind == "optimizer":  # the step's end waits for the GPU, then the data
                        host[s] = max(host[s], compute[s]) + 2000 * US
                at[s] += 1
                progress = True
    for s in range(IPP):
        if at[s] != len(programs[s]):
            sys.exit(f"the interleaved play deadlocked at stage {s}")
    return done


def interleaved_truth(played_by_stage):
    ranks = {}
    for stage, played in sorted(played_by_stage.items()):
        steps = [[] for _ in range(STEPS)]
        for item, start, end, step, _host in played:
            if item[0] in ("F", "B"):
                steps[step].append(["forward" if item[0] == "F" else "backward", item[2], item[3],
                                    start, end])
        ranks[str(stage)] = {"stage": stage, "dp": 0, "steps": steps}
    return {"schedule": "interleaved", "pp": IPP, "dp": 1, "virtual_stages": ICHUNKS,
            "microbatches": IMICROBATCHES, "steps": STEPS, "megatron_commit": "d98e8a64",
            "files": [f"interleaved-rank{s}.sqlite" for s in range(IPP)], "ranks": ranks}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    played = play()
    job = Export(os.path.join(out, "job.sqlite"))
    for rank, items in played.items():
        export = Export(os.path.join(out, f"rank{rank}.sqlite"))
        write_rank(export, rank, items)
        export.close()
        write_rank(job, rank, items)
    job.close()
    interleaved = play_interleaved()
    for stage, items in interleaved.items():
        export = Export(os.path.join(out, f"interleaved-rank{stage}.sqlite"))
        write_rank(export, stage, items)
        export.close()
    truth = {"jobs": {"1f1b-pp4-dp2": truth_of(played),
                      "interleaved-pp4-v2": interleaved_truth(interleaved)}}
    with open(os.path.join(out, "truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
