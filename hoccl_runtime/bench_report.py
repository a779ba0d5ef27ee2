"""``hoccl-bench-report RESULTS_DIR -o REPORT.md``: tables (and PNG plots) from benchmark JSON files.

Every ``*.json`` in the folder with a ``rows`` list is read; a row is
``{"op", "impl", "size", "gbps", "host_us"}`` (as ``examples/bench_intranode.py`` and
``examples/bench_nccl.py`` write them). For each op, one table of bandwidth by size and
implementation (host microseconds per call beside it), and with ``--plots`` a bandwidth-vs-size PNG.
The header names each file's machine, GPU, driver and date, so a report says where its numbers
came from.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "load_results", "render"]


def load_results(folder: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows, run headers) of every result file in ``folder``."""
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder of benchmark results (write them with --out)")
    rows, runs = [], []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not valid JSON ({exc}); rerun the benchmark that wrote it") from None
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            continue
        runs.append({"file": path.name, **{k: data.get(k) for k in ("date", "gpu", "driver", "env", "machine")}})
        for row in data["rows"]:
            missing = {"op", "impl", "size", "gbps"} - set(row)
            if missing:
                raise ValueError(f"{path}: a row lacks {sorted(missing)}: {row}")
            rows.append({**row, "file": path.name})
    if not rows:
        raise ValueError(f"no benchmark rows in {folder} (expected *.json files with a 'rows' list)")
    return rows, runs


def _size(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 and not n % (1 << 30) else f"{n >> 20} MiB" if n >= 1 << 20 \
        else f"{n >> 10} KiB" if n >= 1 << 10 else f"{n} B"


def render(rows: list[dict[str, Any]], runs: list[dict[str, Any]]) -> str:
    lines = ["# Benchmark report", "", "Sources:", ""]
    for run in runs:
        env = {k: v for k, v in (run.get("env") or {}).items() if v is not None}
        lines.append(f"* `{run['file']}`: {run.get('gpu') or run.get('machine') or '?'}, driver {run.get('driver')}, "
                     f"{run.get('date')}" + (f", env {env}" if env else ""))
    for op in sorted({r["op"] for r in rows}):
        mine = [r for r in rows if r["op"] == op]
        impls = sorted({r["impl"] for r in mine})
        sizes = sorted({int(r["size"]) for r in mine})
        cell = {(r["impl"], int(r["size"])): r for r in mine}
        lines += ["", f"## {op}", "", "GB/s (host us per call)", "",
                  "| size | " + " | ".join(impls) + " |", "|---:|" + "---:|" * len(impls)]
        for s in sizes:
            vals = []
            for impl in impls:
                r = cell.get((impl, s))
                if r is None:
                    vals.append("")
                else:
                    host = r.get("host_us")
                    vals.append(f"{r['gbps']:.1f}" + (f" ({host:.0f})" if host is not None else ""))
            lines.append(f"| {_size(s)} | " + " | ".join(vals) + " |")
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
    for op in sorted({r["op"] for r in rows}):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for impl in sorted({r["impl"] for r in rows if r["op"] == op}):
            pts = sorted((int(r["size"]), r["gbps"]) for r in rows if r["op"] == op and r["impl"] == impl)
            ax.plot([p[0] / 2**20 for p in pts], [p[1] for p in pts], marker="o", label=impl)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (MiB)")
        ax.set_ylabel("GB/s")
        ax.set_title(op)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        path = folder / f"{op}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        out.append(path)
    return out


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
        print(f"hoccl-bench-report: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
