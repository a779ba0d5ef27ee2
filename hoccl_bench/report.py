"""``hoccl-bench-report RESULTS_DIR -o REPORT.md``: tables (and PNG plots) from benchmark JSON files.

Every ``*.json`` in the folder with a ``rows`` list is read. Bandwidth files (``hoccl-bench sweep``,
``examples/bench_intranode.py``, ``examples/bench_nccl.py``) have rows ``{"op", "impl", "size", "gbps",
"host_us"}`` and optionally ``"sms"``: one table per op of GB/s by size and implementation (host
microseconds per call beside it) and a table of SMs occupied. Files with a ``kind`` are
``"launch"`` (host us per call by size), ``"contention"`` (slowdown of a load beside each
communicator, with the bandwidth it delivered) and ``"internode"`` (GPU -> GPU over the network
path, with its pieces, and where present its 1 GiB transport settings against plain sockets). With
``--plots``: bandwidth-vs-size PNGs, launch cost, slowdown bars and, per load, the trade-off curve
(slowdown against the bandwidth delivered, HOCCL and raw copies at each paced rate and full rate).
The header names each file's machine, GPU, driver and date, so a report says where its numbers
came from.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "load_results", "render"]


def load_results(folder: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows, run headers) of every result file in ``folder``; each row carries its file's ``kind``."""
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder of benchmark results (write them with --out)")
    rows, runs = [], []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not valid JSON ({exc}); rerun the benchmark that wrote it") from None
        if not isinstance(data, dict):
            continue
        kind = data.get("kind", "bandwidth")
        if not isinstance(kind, str):
            raise ValueError(f"{path}: 'kind' is {kind!r}; expected one of {sorted(_NEEDS)}")
        if not isinstance(data.get("rows"), list):
            if "rows" in data:
                raise ValueError(f"{path}: 'rows' is a {type(data['rows']).__name__}, not a list; rerun the benchmark")
            continue  # not a benchmark file (another tool's JSON in the folder)
        if kind not in _NEEDS:
            raise ValueError(f"{path}: unknown kind {kind!r}; expected one of {sorted(_NEEDS)}")
        env = data.get("env")
        if env is not None and not isinstance(env, dict):
            raise ValueError(f"{path}: 'env' is a {type(env).__name__}; expected an object of settings")
        runs.append({"file": path.name, "kind": kind,
                     **{k: data.get(k) for k in ("date", "gpu", "driver", "env", "machine", "torch", "nccl",
                                                 "traffic_first")}})
        variants = data.get("variants")
        if variants is not None and not isinstance(variants, list):
            raise ValueError(f"{path}: 'variants' is a {type(variants).__name__}, not a list; rerun the benchmark")
        settings = [v for v in variants or [] if isinstance(v, dict) and "setting" in v]
        for v in settings:
            _numbers(path, f"variant {v.get('setting')!r}", v, _SETTING_NUMBERS, required=True)
            rounds = v.get("per_round")
            if rounds is not None and (not isinstance(rounds, list) or not all(_is_number(x) for x in rounds)):
                raise ValueError(f"{path}: variant {v.get('setting')!r}'s per_round is {rounds!r}; expected a list "
                                 "of numbers")
        if kind == "internode" and settings:  # bench_internode's 1 GiB settings against plain sockets
            runs[-1]["settings"] = settings
        need = _NEEDS[kind]
        for i, row in enumerate(data["rows"]):
            if not isinstance(row, dict):
                raise ValueError(f"{path}: row {i} is a {type(row).__name__}, not an object; rerun the benchmark")
            missing = need - set(row)
            if missing:
                raise ValueError(f"{path}: a row lacks {sorted(missing)}: {row}")
            for key in sorted(need):
                want = str if key in _TEXT else int if key == "size" else (int, float)
                value = row[key]
                if isinstance(value, bool) or not isinstance(value, want) or (key == "size" and value < 0):
                    raise ValueError(f"{path}: row {i}'s {key} is {value!r}; expected "
                                     f"{'text' if want is str else 'a byte count' if want is int else 'a number'}")
            _numbers(path, f"row {i}", row, _OPTIONAL_NUMBERS)
            spread = row.get("spread")
            if spread is not None and (not isinstance(spread, list) or len(spread) != 2 or
                                       not all(_is_number(x) for x in spread)):
                raise ValueError(f"{path}: row {i}'s spread is {spread!r}; expected [min, max]")
            rows.append({**row, "file": path.name, "kind": kind})
    if not rows:
        raise ValueError(f"no benchmark rows in {folder} (expected *.json files with a 'rows' list)")
    return rows, runs


_TEXT = {"op", "impl", "load", "comm"}  # the other fields every row needs are numbers
# fields a row may carry, each a number (or null) where present; a variant's 1 GiB setting figures
_OPTIONAL_NUMBERS = ("host_us", "sms", "watts", "sm_mhz", "paired", "power_cap", "cpu_us_per_call", "of_raw_sockets",
                     "seconds", "d2h_seconds", "transport_seconds", "raw_socket_seconds", "host_path_seconds")
_SETTING_NUMBERS = ("gpu_seconds", "raw_socket_seconds", "of_raw_sockets")


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _numbers(path: Path, what: str, obj: dict[str, Any], keys: Sequence[str], required: bool = False) -> None:
    for key in keys:
        if key not in obj and required:
            raise ValueError(f"{path}: {what} lacks {key}; rerun the benchmark that wrote it")
        value = obj.get(key)
        if (value is not None or required) and not _is_number(value):
            raise ValueError(f"{path}: {what}'s {key} is {value!r}; expected a number")
_NEEDS = {"bandwidth": {"op", "impl", "size", "gbps"}, "internode": {"op", "impl", "size", "gbps"},
          "launch": {"op", "impl", "size", "host_us"}, "contention": {"load", "comm", "slowdown", "delivered_gbps"}}


def _size(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 and not n % (1 << 30) else f"{n >> 20} MiB" if n >= 1 << 20 \
        else f"{n >> 10} KiB" if n >= 1 << 10 else f"{n} B"


def _grid(rows: list[dict[str, Any]], col: str, fmt: Any) -> list[str]:
    """A size x ``col`` table of ``fmt(row)``."""
    cols = sorted({r[col] for r in rows})
    cell = {(r[col], int(r["size"])): r for r in rows}
    lines = ["| size | " + " | ".join(cols) + " |", "|---:|" + "---:|" * len(cols)]
    for size in sorted({int(r["size"]) for r in rows}):
        lines.append(f"| {_size(size)} | " + " | ".join(fmt(cell[(c, size)]) if (c, size) in cell else ""
                                                       for c in cols) + " |")
    return lines


def _by_impl(rows: list[dict[str, Any]], key: str, title: str, fmt: Any) -> list[str]:
    """An (op, size) x implementation table of ``fmt(row[key])`` for the rows that measured ``key``."""
    got = [r for r in rows if r.get(key) is not None]
    if not got:
        return []
    impls = sorted({r["impl"] for r in got})
    lines = ["", f"## {title}", "", "| op | size | " + " | ".join(impls) + " |", "|---|---:|" + "---:|" * len(impls)]
    for op, size in sorted({(r["op"], int(r["size"])) for r in got}):
        cell = {r["impl"]: fmt(r[key]) for r in got if r["op"] == op and int(r["size"]) == size}
        lines.append(f"| {op} | {_size(size)} | " + " | ".join(cell.get(i, "") for i in impls) + " |")
    return lines


def render(rows: list[dict[str, Any]], runs: list[dict[str, Any]]) -> str:
    lines = ["# Benchmark report", "", "Sources:", ""]
    for run in runs:
        env = {k: v for k, v in (run.get("env") or {}).items() if v is not None}
        extra = "".join(f", {k} {run[k]}" for k in ("torch", "nccl") if run.get(k))
        lines.append(f"* `{run['file']}` ({run['kind']}): {run.get('gpu') or run.get('machine') or '?'}, driver "
                     f"{run.get('driver')}{extra}, {run.get('date')}" + (f", env {env}" if env else "") +
                     (", traffic issued before the load" if run.get("traffic_first") else ""))
    bw = [r for r in rows if r["kind"] == "bandwidth"]
    for op in sorted({r["op"] for r in bw}):
        lines += ["", f"## {op}", "", "algbw GB/s, nccl-tests' definition (host us per call)", ""]
        lines += _grid([r for r in bw if r["op"] == op], "impl",
                       lambda r: f"{r['gbps']:.1f}" + (f" ({r['host_us']:.0f})" if r.get("host_us") is not None
                                                       else ""))
    lines += _by_impl(bw, "sms", "SMs occupied (largest kernel grid in a profiler trace; 0 = no kernel)", str)
    lines += _by_impl(bw, "sm_free", "SM-free (the call's work ended while a kernel held every SM: "
                      "hoccl_bench.smfree)", lambda free: "yes" if free else "no")
    launch = [r for r in rows if r["kind"] == "launch"]
    for op in sorted({r["op"] for r in launch}):
        lines += ["", f"## Launch cost: {op}", "", "host us per call (slowest rank)", ""]
        lines += _grid([r for r in launch if r["op"] == op], "impl", lambda r: f"{r['host_us']:.1f}")
    cont = [r for r in rows if r["kind"] == "contention"]
    if cont:
        several = len({r["file"] for r in cont}) > 1  # then each row names its file (see Sources for its setting)
        lines += ["", "## Contention", "", ("| run " if several else "") + "| load | beside | slowdown | paired | "
                  "min..max | delivered GB/s | W | SM MHz | power-capped |",
                  ("|---" if several else "") + "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in cont:
            lo, hi = r.get("spread") or (r["slowdown"], r["slowdown"])
            w, m, pr = r.get("watts"), r.get("sm_mhz"), r.get("paired")  # paired: results from 2026-11-30 08:30 on
            cap = r.get("power_cap")  # share of nvidia-smi samples with the SW power cap on (absent in older reports)
            lines.append((f"| `{r['file']}` " if several else "") +
                         f"| {r['load']} | {r['comm']} | {100 * (r['slowdown'] - 1):+.1f}% | "
                         f"{'' if pr is None else f'{100 * (pr - 1):+.1f}%'} | "
                         f"{100 * (lo - 1):+.1f}..{100 * (hi - 1):+.1f}% | {r['delivered_gbps']:.1f} | "
                         f"{'' if w is None else f'{w:.0f}'} | {'' if m is None else f'{m:.0f}'} | "
                         f"{'' if cap is None else f'{100 * cap:.0f}%'} |")
    inter = [r for r in rows if r["kind"] == "internode"]
    if inter:
        lines += ["", "## Inter-node (GPU -> GPU over the network path)", "",
                  "| op | size | GB/s | total ms | device->host copy alone ms | transport alone ms | "
                  "plain sockets ms | of sockets | host path ms | CPU us/call |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in inter:
            def ms(key: str, r: dict[str, Any] = r) -> str:
                return f"{r[key] * 1e3:.2f}" if r.get(key) is not None else ""
            cpu, of = r.get("cpu_us_per_call"), r.get("of_raw_sockets")
            lines.append(f"| {r['op']} | {_size(int(r['size']))} | {r['gbps']:.2f} | {ms('seconds')} | "
                         f"{ms('d2h_seconds')} | {ms('transport_seconds')} | {ms('raw_socket_seconds')} | "
                         f"{'' if of is None else f'{of:.2f}'} | {ms('host_path_seconds')} | "
                         f"{'' if cpu is None else f'{cpu:.0f}'} |")
    for run in runs:
        if run.get("settings"):
            lines += ["", f"### 1 GiB by transport setting, against the same round's plain sockets (`{run['file']}`)",
                      "", "| setting | GPU -> GPU ms | plain sockets ms | of sockets | each round |",
                      "|---|---:|---:|---:|---|"]
            for v in run["settings"]:
                rounds = " ".join(f"{x:.2f}" for x in v.get("per_round") or [])
                lines.append(f"| {v['setting']} | {v['gpu_seconds'] * 1e3:.2f} | {v['raw_socket_seconds'] * 1e3:.2f} | "
                             f"{v['of_raw_sockets']:.2f} | {rounds} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], folder: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("--plots needs matplotlib; pip install 'hoccl[plot]'") from None
    folder.mkdir(parents=True, exist_ok=True)
    out = []

    def save(fig: Any, name: str) -> None:
        # a name from the results' own text (an op, a load) must not leave the folder: anything but letters,
        # digits, '.', '-' and '_' becomes '_'; the file is written beside and moved over the name, so a
        # symlink planted there is replaced, not written through
        import os
        import re
        import tempfile

        safe = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "plot.png"
        target = folder / safe
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".hoccl-plot-", suffix=".png")
        try:
            with os.fdopen(fd, "wb") as fh:
                fig.savefig(fh, format="png", dpi=110, bbox_inches="tight")
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        finally:
            plt.close(fig)
        out.append(target)

    def lines(kind: str, key: str, ylabel: str, name: str) -> None:
        mine = [r for r in rows if r["kind"] == kind]
        for op in sorted({r["op"] for r in mine}):
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for impl in sorted({r["impl"] for r in mine if r["op"] == op}):
                pts = sorted((int(r["size"]), r[key]) for r in mine if r["op"] == op and r["impl"] == impl)
                ax.plot([p[0] / 2**20 for p in pts], [p[1] for p in pts], marker="o", label=impl)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("size (MiB)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{op}" + (" (launch cost)" if kind == "launch" else ""))
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            save(fig, f"{name}{op}.png")

    lines("bandwidth", "gbps", "GB/s", "")
    lines("launch", "host_us", "host us per call", "launch-")
    cont = [r for r in rows if r["kind"] == "contention"]
    files = sorted({r["file"] for r in cont})
    for file in files:  # one set of plots per run when there are several (named after the file)
        tag = f"{Path(file).stem}-" if len(files) > 1 else ""
        _contention_plots(plt, [r for r in cont if r["file"] == file], tag, save)
    return out


def _contention_plots(plt: Any, cont: list[dict[str, Any]], tag: str, save: Any) -> None:
    """A bar chart and a trade-off curve per load of one contention run's rows."""
    for load in sorted({r["load"] for r in cont}):
        mine = [r for r in cont if r["load"] == load and r["comm"] != "alone"]
        fig, ax = plt.subplots(figsize=(8, 4.5))
        ax.bar(range(len(mine)), [100 * (r["slowdown"] - 1) for r in mine])
        ax.set_xticks(range(len(mine)), [f"{r['comm']}\n{r['delivered_gbps']:.0f} GB/s" for r in mine],
                      fontsize=7, rotation=45, ha="right")
        ax.set_ylabel("slowdown (%)")
        ax.set_title(f"{load} beside back-to-back AllGathers (label: bandwidth delivered)")
        ax.grid(alpha=0.3, axis="y")
        save(fig, f"contention-{tag}{load}.png")
        # the trade-off curve: slowdown against bandwidth delivered, paced rates and full rate joined per family
        fig, ax = plt.subplots(figsize=(7, 4.5))
        lines_of: dict[str, list[tuple[float, float, float]]] = {}
        # a family with paced rows ("hoccl", "raw-inplace", ...) is a curve through its rates and its full rate
        paced = {r["comm"].partition("@")[0] for r in mine if "@" in r["comm"]}
        for r in mine:  # "hoccl", "hoccl@100", "hoccl@100/4000us" (paced with another clock tick)
            family, _, rest = r["comm"].partition("@")
            rate, _, period = rest.partition("/")
            if family in paced:
                pt = (float(rate or "inf"), r["delivered_gbps"], 100 * (r.get("paired") or r["slowdown"]) - 100)
                lines_of.setdefault(family + (f", tick {period}" if period else ""), []).append(pt)
        full = {r["comm"] for r in mine if "@" not in r["comm"]}  # families with a full-rate row
        for k, (name, pts) in enumerate(sorted(lines_of.items())):
            # in order of the rate asked for (full rate last): a cap above what the link gives delivers alike
            pts.sort()
            then = ", then full rate" if ", tick" not in name and name in full else ""
            ax.plot([p[1] for p in pts], [p[2] for p in pts], marker="o", color=f"C{k}",
                    label=f"{name} (paced at each rate{then})")
        others = [r for r in mine if "@" not in r["comm"] and r["comm"] not in paced]
        for k, r in enumerate(others):
            ax.scatter([r["delivered_gbps"]], [100 * (r.get("paired") or r["slowdown"]) - 100], marker="s",
                       color=f"C{k + len(lines_of)}", label=r["comm"])
        ax.set_xlabel("AllGather bandwidth delivered beside the load (GB/s per rank)")
        ax.set_ylabel("slowdown of the load (%, paired where measured)")
        ax.set_title(f"{load}: rate against slowdown")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, f"contention-{tag}{load}-curve.png")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hoccl-bench-report", description=__doc__.splitlines()[0])
    p.add_argument("results", help="folder of benchmark JSON files")
    p.add_argument("-o", "--output", default=None, help="markdown file to write (default: print)")
    p.add_argument("--plots", default=None, metavar="DIR", help="also write one bandwidth-vs-size PNG per op")
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:  # argparse's own exit: keep its code
        return int(exc.code or 0)
    try:
        rows, runs = load_results(Path(args.results))
        text = render(rows, runs)
        if args.plots:
            pngs = plot(rows, Path(args.plots))
            text += "\n" + "\n".join(f"![{p.stem}]({p})" for p in pngs) + "\n"
        if args.output:
            Path(args.output).write_text(text)
        else:
            sys.stdout.write(text)
    except (ValueError, OSError) as exc:
        print(f"hoccl-bench-report: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence: one line, not a traceback
        print(f"hoccl-bench-report: internal error: {type(exc).__name__}: {exc}; this is a bug in HOCCL, please "
              "report it with the results folder", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
