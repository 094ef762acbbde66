"""Prints what Holistic Trace Analysis (HTA 0.5) finds in a folder of per-rank traces, as JSON:
per rank, the GPU kernels by type, the temporal breakdown and the communication/computation
overlap. tests/export/test_export_hta.cpp compares it with Fulcrum's own figures.

Usage: python hta_figures.py TRACE_DIR
"""
import json
import logging
import math
import sys

logging.disable(logging.CRITICAL)  # HTA logs every file it parses

from hta.trace_analysis import TraceAnalysis  # noqa: E402
from hta.utils.utils import get_kernel_type, merge_kernel_intervals  # noqa: E402


def main(trace_dir):
    analysis = TraceAnalysis(trace_dir=trace_dir)
    trace = analysis.t
    symbols = trace.symbol_table.get_sym_table()
    temporal = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    overlap = analysis.get_comm_comp_overlap(visualize=False).set_index("rank")
    figures = {}
    for rank, frame in trace.traces.items():
        on_streams = frame[frame["stream"].ne(-1)].copy()
        on_streams["type"] = [get_kernel_type(symbols[name]) for name in on_streams["name"]]
        on_streams["category"] = [symbols[cat] for cat in on_streams["cat"]]
        # HTA types every record on a stream by its name, so a cuda_sync record named, say,
        # "Context Sync" counts as a computation kernel; the kernels proper are cat "kernel".
        kernels = on_streams[on_streams["category"].eq("kernel")]
        computing = merge_kernel_intervals(kernels[kernels["type"].eq("COMPUTATION")].copy())
        ratio = float(overlap.loc[rank, "comp_comm_overlap_pctg"]) / 100  # HTA rounds to 0.01 %
        figures[str(rank)] = {
            "computation_kernels": int(kernels["type"].eq("COMPUTATION").sum()),
            "communication_kernels": int(kernels["type"].eq("COMMUNICATION").sum()),
            "memory_kernels": int(on_streams["type"].eq("MEMORY").sum()),
            "other_stream_records": int((~on_streams["category"].eq("kernel") & ~on_streams["type"].eq("MEMORY")).sum()),
            "kernel_compute_time_us": float((computing["end"] - computing["ts"]).sum()),
            "kernel_time_us": float(temporal.loc[rank, "kernel_time(us)"]),
            "idle_time_us": float(temporal.loc[rank, "idle_time(us)"]),
            "compute_time_us": float(temporal.loc[rank, "compute_time(us)"]),
            "comm_comp_overlap": None if math.isnan(ratio) else ratio,
        }
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
