"""bench/compare's output side: parses the programs' tables, writes the CSV
files, the PNG plots and the generated section of BENCHMARKS.md (between
BEGIN/END markers, so that the hand-written analysis around it stays)."""

import csv
import datetime
import glob
import json
import os
import platform
import re
import subprocess

BEGIN = "<!-- bench/compare: generated section, do not edit by hand -->"
END = "<!-- bench/compare: end of generated section -->"
SYSTEM_ORDER = ["tutti-tcp", "tutti-ordered", "tutti-mpi", "mpi-shm", "mpi-tcp", "gloo-ring", "gloo-ring_chunked",
                "torch-gloo", "horovod"]


# tuttirun prefixes each line of a rank's output: "[0]<stdout>: ", and under
# --mpi mpirun's --tag-output does: "[1,0]<stdout>:".
_RANK_PREFIX = re.compile(r"^\[[\d,]+\]<std(out|err)>: ?")


def _lines(text):
    return [_RANK_PREFIX.sub("", line) for line in text.splitlines()]


def parse_rows(text):
    """Table rows of bench_util.h / bench_common.py."""
    rows = []
    for line in _lines(text):
        f = line.split()
        if len(f) == 9 and not line.startswith("#") and f[0].isdigit():
            rows.append(dict(bytes=int(f[0]), count=int(f[1]), dtype=f[2], op=f[4],
                             time_us=float(f[5]), algbw=float(f[6]), busbw=float(f[7]),
                             wrong=int(f[8])))
    return rows


def parse_steps(text):
    steps = []
    for line in _lines(text):
        f = line.split()
        if len(f) == 7 and f[0] == "gradset":
            steps.append(dict(strategy=f[1], tensors=int(f[2]), bytes=int(f[3]),
                              median_ms=float(f[4]), min_ms=float(f[5]), max_ms=float(f[6])))
    return steps


def _cmd(argv):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        return r.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_context():
    model = next((l.split(":", 1)[1].strip() for l in _cmd(["lscpu"]).splitlines()
                  if l.startswith("Model name")), platform.processor())
    mem = next((l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")), "0")
    return dict(date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), cpu=model,
                cores=os.cpu_count(), mem_gib=int(mem) / (1 << 20), load_before=os.getloadavg(),
                kernel=platform.release(),
                openmpi=(_cmd(["mpirun", "--version"]).splitlines() or ["none"])[0],
                torch=_cmd(["/usr/bin/python3", "-c", "import torch; print(torch.__version__)"]),
                gloo=_cmd(["dpkg-query", "-W", "-f=${Version}", "libgloo-dev"]))


def save_run(args, runner, context):
    """What a later --report-only needs besides the logs: results/run.json."""
    with open(os.path.join(args.out, "run.json"), "w") as f:
        json.dump(dict(context=context, skipped=runner.skipped, failures=runner.failures,
                       np=args.np, logs=runner.labels), f, indent=1)


def _log_system(label):
    """Log name (without -npN) of a gradient-set job -> its system."""
    for prefix, system in (("mpi-tutti-", "tutti-mpi"), ("tutti-", "tutti-tcp"),
                           ("horovod-", "horovod")):
        if label.startswith(prefix):
            return system
    return label


def load_run(args, runner):
    """Refills `runner` from results/logs/*.txt and results/run.json."""
    with open(os.path.join(args.out, "run.json")) as f:
        run = json.load(f)
    runner.skipped, runner.failures = run["skipped"], run["failures"]
    args.np = run["np"]
    # Only this run's logs: logs/ also holds other benches' and older runs'.
    paths = sorted(glob.glob(os.path.join(args.out, "logs", "*.txt")))
    if "logs" in run:
        paths = [os.path.join(args.out, "logs", label + ".txt") for label in run["logs"]]
    for path in paths:
        name = os.path.basename(path)[:-4]
        text = open(path).read()
        if name == "memcpy":
            runner.memcpy = parse_rows(text)
            continue
        label, _, np_ = name.rpartition("-np")
        if label.startswith("gradset-"):
            for s in parse_steps(text):
                s.update(system=_log_system(label[len("gradset-"):]), np=int(np_))
                runner.steps.append(s)
        else:
            for r in parse_rows(text):
                r.update(system=label, np=int(np_))
                runner.rows.append(r)
    return run["context"]


def _fmt_size(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _write_csv(path, rows, fields):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def _systems(rows):
    present = {r["system"] for r in rows}
    return [s for s in SYSTEM_ORDER if s in present] + sorted(present - set(SYSTEM_ORDER))


def _lookup(rows, system, np_, nbytes):
    for r in rows:
        if r["system"] == system and r["np"] == np_ and r["bytes"] == nbytes:
            return r
    return None


def _table(rows, np_, key, fmt):
    systems = _systems([r for r in rows if r["np"] == np_])
    sizes = sorted({r["bytes"] for r in rows if r["np"] == np_})
    out = ["| size | " + " | ".join(systems) + " |", "|---" * (len(systems) + 1) + "|"]
    for n in sizes:
        cells = []
        for s in systems:
            r = _lookup(rows, s, np_, n)
            cells.append(fmt(r[key]) if r else "–")
        out.append(f"| {_fmt_size(n)} | " + " | ".join(cells) + " |")
    return out


def _step(steps, np_, system, strategy):
    return next((s["median_ms"] for s in steps if s["np"] == np_ and s["system"] == system
                 and s["strategy"] == strategy), None)


def bars(rows, steps, nps):
    """Issue 6's bars: (bar, np, worst ratio text, met) per line."""
    out = []

    def ratio_bar(title, other, pick, limit, better_is_low, system="tutti-tcp"):
        for np_ in nps:
            ratios = []
            for r in rows:
                if r["system"] != system or r["np"] != np_ or not pick(r["bytes"]):
                    continue
                o = _lookup(rows, other, np_, r["bytes"])
                if not o:
                    continue
                if better_is_low:
                    ratios.append((r["time_us"] / o["time_us"], r["bytes"]))
                else:
                    ratios.append((r["busbw"] / o["busbw"] if o["busbw"] else 0, r["bytes"]))
            if not ratios:
                out.append((title, np_, f"no {other} figures", None))
                continue
            worst = max(ratios) if better_is_low else min(ratios)
            values = ", ".join(f"{_fmt_size(b)}: {v:.2f}×" for v, b in sorted(ratios, key=lambda x: x[1]))
            met = worst[0] <= limit if better_is_low else worst[0] >= limit
            out.append((title, np_, f"worst {worst[0]:.2f}× at {_fmt_size(worst[1])} ({values})", met))

    big = lambda b: b >= (1 << 20)
    small = lambda b: b <= 4096
    ratio_bar("allreduce ≥ 1 MiB busbw ≥ 1.0× Open MPI tcp", "mpi-tcp", big, 1.0, False)
    ratio_bar("allreduce ≥ 1 MiB busbw ≥ 1.5× torch gloo", "torch-gloo", big, 1.5, False)
    ratio_bar("allreduce ≤ 4 KiB time ≤ 1.5× Open MPI tcp", "mpi-tcp", small, 1.5, True)
    ratio_bar("allreduce ≤ 4 KiB time ≤ 0.5× torch gloo", "torch-gloo", small, 0.5, True)
    # The ordered lane (tutti-bench --ordered, docs/ordered-lane.md).
    mid = lambda b: (16 << 10) <= b <= (1 << 20)
    ratio_bar("ordered: allreduce ≤ 4 KiB time ≤ 1.5× Open MPI tcp", "mpi-tcp", small, 1.5, True,
              "tutti-ordered")
    ratio_bar("ordered: allreduce 16 KiB-1 MiB busbw ≥ 1.0× Open MPI tcp", "mpi-tcp", mid, 1.0,
              False, "tutti-ordered")
    ratio_bar("ordered: allreduce 16 KiB-1 MiB busbw ≥ 0.5× Open MPI shm", "mpi-shm", mid, 0.5,
              False, "tutti-ordered")
    ratio_bar("allreduce ≥ 1 MiB busbw ≥ 1.5× Horovod", "horovod", big, 1.5, False)
    for np_ in nps:
        tutti = _step(steps, np_, "tutti-tcp",
                      next((s["strategy"] for s in steps if s["np"] == np_ and
                            s["system"] == "tutti-tcp" and s["strategy"] != "tutti-fusion-off"), ""))
        mpi = [s["median_ms"] for s in steps if s["np"] == np_ and s["system"] == "mpi-tcp"]
        hvd = _step(steps, np_, "horovod", "horovod-fusion-default")
        for title, other, limit in (("gradient set ≤ 1.0× faster Open MPI tcp strategy",
                                     min(mpi) if mpi else None, 1.0),
                                    ("gradient set ≤ 0.7× Horovod (default fusion)", hvd, 0.7)):
            if tutti is None or other is None:
                out.append((title, np_, "missing figures", None))
            else:
                out.append((title, np_, f"{tutti:.1f} ms vs {other:.1f} ms = {tutti / other:.2f}×",
                            tutti / other <= limit))
    return out


def _plots(args, runner, nps):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return [f"no plots: {e}"]
    files = []
    for np_ in nps:
        fig, ax = plt.subplots(figsize=(8, 5))
        for s in _systems([r for r in runner.rows if r["np"] == np_]):
            pts = sorted((r["bytes"], r["busbw"]) for r in runner.rows
                         if r["system"] == s and r["np"] == np_ and r["busbw"] > 0)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=s)
        if runner.memcpy:
            pts = sorted((r["bytes"], r["busbw"]) for r in runner.memcpy)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "k--", label="memcpy (1 core)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes per rank")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"float32 sum allreduce, {np_} ranks (median, slowest rank)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        name = f"allreduce_busbw_np{np_}.png"
        fig.savefig(os.path.join(args.out, name), dpi=110, bbox_inches="tight")
        plt.close(fig)
        files.append(name)
    if runner.steps:
        keys = [(sy, st) for sy in _systems(runner.steps)
                for st in sorted({s["strategy"] for s in runner.steps if s["system"] == sy})]
        labels = [f"{sy}: " + st.replace(sy.split("-")[0] + "-", "", 1) for sy, st in keys]
        fig, ax = plt.subplots(figsize=(9, 5))
        width = 0.8 / len(nps)
        for i, np_ in enumerate(nps):
            values = [_step(runner.steps, np_, sy, st) or 0 for sy, st in keys]
            ax.bar([x + i * width for x in range(len(labels))], values, width, label=f"np {np_}")
        ax.set_xticks([x + width * (len(nps) - 1) / 2 for x in range(len(labels))])
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("ms per step (median)")
        ax.set_title("ResNet-50 gradient set (161 tensors, 102 MB) allreduced per step")
        ax.legend()
        fig.savefig(os.path.join(args.out, "gradient_set.png"), dpi=110, bbox_inches="tight")
        plt.close(fig)
        files.append("gradient_set.png")
    return files


def _markdown(args, runner, context, plots, nps, full=True):
    """The run's Markdown section. `full`: every size's busbw and time and the
    memcpy table too (results/summary.md); else the bars, the gradient set and
    the plots, with a link to the full tables (BENCHMARKS.md)."""
    rel = os.path.relpath(args.out, os.path.dirname(os.path.abspath(args.report or ".")))
    c = context
    lb, la = c["load_before"], c["load_after"]
    md = [BEGIN, "",
          f"Run of `bench/compare{' --quick' if c['quick'] else ''}` on {c['date']}: {c['cpu']}, "
          f"{c['cores']} cores, {c['mem_gib']:.0f} GiB, Linux {c['kernel']}; {c['openmpi']}; "
          f"torch {c['torch']}; libgloo-dev {c['gloo']}. Took {c['duration_s'] / 60:.1f} min.",
          f"Load average before: {lb[0]:.2f} / {lb[1]:.2f} / {lb[2]:.2f} (1/5/15 min); "
          f"after: {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f}."
          + (" **The machine was busy (load > 1.5): other jobs shared the 2 cores; "
             "treat the figures as noisy.**" if max(lb[0], la[0]) > 1.5 else ""), ""]
    if runner.skipped:
        md += ["Not measured:", ""] + [f"- {k}: {v}" for k, v in sorted(runner.skipped.items())]
        md.append("")
    if runner.failures:
        md += ["Jobs that failed:", ""] + [f"- {f}" for f in runner.failures] + [""]
    wrong = [r for r in runner.rows if r["wrong"] not in (0, -1)]
    md.append("Result checks: " + ("every point had #wrong = 0." if not wrong else
                                   f"{len(wrong)} points had wrong elements: " +
                                   ", ".join(f"{r['system']} np{r['np']} {r['bytes']} B"
                                             for r in wrong)))
    md += ["", "### Bars of issue 6", "", "| bar | np | figures (tutti / other) | met |",
           "|---|---|---|---|"]
    for title, np_, text, met in bars(runner.rows, runner.steps, nps):
        md.append(f"| {title} | {np_} | {text} | {'–' if met is None else ('met' if met else '**missed**')} |")
    if not full:
        md += ["", f"Every size's busbw and time, and memcpy: [{rel}/summary.md]({rel}/summary.md)."]
    for np_ in nps if full else []:
        md += ["", f"### Allreduce, {np_} ranks: busbw (GB/s)", ""]
        md += _table(runner.rows, np_, "busbw", lambda v: f"{v:.3f}")
        md += ["", f"### Allreduce, {np_} ranks: time (µs, slowest rank, median)", ""]
        md += _table(runner.rows, np_, "time_us", lambda v: f"{v:.1f}" if v < 1e4 else f"{v:.0f}")
    if runner.steps:
        md += ["", "### ResNet-50 gradient set: ms per step (median [min–max])", "",
               "| system | strategy | " + " | ".join(f"np{n}" for n in nps) + " |",
               "|---|---|" + "---|" * len(nps)]
        for system in _systems(runner.steps):
            for strategy in sorted({s["strategy"] for s in runner.steps if s["system"] == system}):
                cells = []
                for np_ in nps:
                    s = next((s for s in runner.steps if s["np"] == np_ and
                              s["system"] == system and s["strategy"] == strategy), None)
                    cells.append(f"{s['median_ms']:.1f} [{s['min_ms']:.0f}–{s['max_ms']:.0f}]"
                                 if s else "–")
                md.append(f"| {system} | {strategy} | " + " | ".join(cells) + " |")
    if runner.memcpy and full:
        md += ["", "### memcpy, one core (GB/s)", "", "| size | GB/s |", "|---|---|"]
        md += [f"| {_fmt_size(r['bytes'])} | {r['busbw']:.2f} |" for r in runner.memcpy
               if r["bytes"] >= 4096]
    if plots:
        md += [""] + [f"![{p}]({rel}/{p})" if p.endswith(".png") else p for p in plots]
    md += ["", END]
    return "\n".join(md) + "\n"


def write_all(args, runner, context):
    nps = args.np
    _write_csv(os.path.join(args.out, "allreduce.csv"), runner.rows,
               ["system", "np", "bytes", "count", "dtype", "time_us", "algbw", "busbw", "wrong"])
    _write_csv(os.path.join(args.out, "gradient_set.csv"), runner.steps,
               ["system", "np", "strategy", "tensors", "bytes", "median_ms", "min_ms", "max_ms"])
    _write_csv(os.path.join(args.out, "memcpy.csv"), runner.memcpy,
               ["bytes", "time_us", "busbw", "wrong"])
    plots = _plots(args, runner, nps)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(_markdown(args, runner, context, plots, nps))
    if not args.report:
        return
    section = _markdown(args, runner, context, plots, nps, full=False)
    text = open(args.report).read() if os.path.exists(args.report) else "# Benchmarks\n\n"
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END) + 1:]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(args.report, "w") as f:
        f.write(text)
