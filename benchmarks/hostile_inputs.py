"""Peak memory and time of `kvprof validate` and `kvprof sweep --dry-run` on the worst specs (issue #15).

    python benchmarks/hostile_inputs.py [--only NAME]

Each command runs in its own process (as a user runs it); its wall time and peak resident memory
(``ru_maxrss`` from ``os.wait4``) are printed beside the bound it must stay under, and the script exits 1
when one does not. The inputs, written to a temporary directory:

  baseline       sweeps/tiny-cpu.yaml: the cost of starting the CLI (Python, pydantic, rich, the catalog)
  1mib-comments  1 MiB of YAML (just under the 1 MiB cap), a tiny sweep under 16k comment lines
  1mib-args      1 MiB of YAML: ~57,000 engine_args keys (114k values, refused by the 100,000-value cap)
  args-under     45,000 keys under engine_args.hf_overrides in 2 engines: 90k values per engine, admitted
  alias-bomb     ten levels of ten aliases (10^10 values once expanded): refused from the node graph
  deep-nesting   engine_args nested 100,000 lists deep: refused
  long-list      workload.prompt_len with 99,000 values: 99,000 points of one engine (max_model_len 8,192, the
                 model's limit: 8,176 run, the rest are dropped)
  max-points     100,000 points: 1 engine × 100 concurrencies × 100 prompts × 10 outputs
  max-grid       the biggest grid under both caps: 10,000 engines × 10 points = 100,000 points
  max-dropped    100,000 combinations of which 99,000 dropped (max_num_seqs 1): the manifest keeps each
  over-cap       10^9 points (3,000 YAML values): refused from the count, before anything is expanded

Bounds, from measurements on a 2-core machine (idle: the CLI alone, baseline, starts in 0.55 s and 60 MB, since
validate and the dry run import neither pandas nor numpy), with 2× headroom for a busy machine:
  * refusals, specs up to 1 MiB and small grids: 4 s and 200 MB (measured idle: ≤ 1.95 s, ≤ 107 MB; a 1 MiB spec
    of comments 0.6 s, of 45,000 engine_args keys 1.6 to 2.0 s);
  * grids at the caps (100,000 points, 10,000 engines): validate and the dry run 10 s and 300 MB (measured idle:
    ≤ 4.7 s, ≤ 225 MB): linear in points and engines, and the dry run's table shows 50 engines and its --json
    no point ids unless -v;
  * the dry run costed on a GPU (--gpu) at the caps: 90 s and 800 MB (measured idle: 33 s, 538 MB). That is
    analysis/planning/sweep_cost.py's roofline for every point (~0.3 ms and ~3.5 kB a point), outside the grid
    code; it is the one to make faster.
The manifest records every dropped combination, ~190 bytes each: at most ~19 MB at the cap (bound 25 MB).
Beyond the caps nothing grows: the count refuses the spec in the time of the baseline.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
MB = 10**6

SMALL = (4.0, 200)  # seconds, MB: refusals, small and 1 MiB specs
GRID = (10.0, 300)  # validate and the dry run of a grid at the caps
GRID_GPU = (90.0, 800)  # the dry run costed on a GPU
MANIFEST_MB = 25  # manifest.json with every dropped combination of a grid at the cap (~190 bytes each)


def tiny_spec(**sections: object) -> dict:
    """tiny-cpu.yaml with sections replaced (a dict updates a dict section; anything else replaces it)."""
    spec = yaml.safe_load(yaml.safe_dump(TINY))
    for section, changes in sections.items():
        if isinstance(changes, dict) and isinstance(spec.get(section), dict):
            spec[section].update(changes)
        else:
            spec[section] = changes
    return spec


def inputs(d: Path) -> dict[str, tuple[Path, str, bool]]:
    """name → (spec path, size class, whether it is valid)."""
    out: dict[str, tuple[Path, str, bool]] = {}

    def put(name: str, text: str, size: str, valid: bool) -> None:
        p = d / f"{name}.yaml"
        p.write_text(text)
        out[name] = (p, size, valid)

    put("baseline", (ROOT / "sweeps" / "tiny-cpu.yaml").read_text(), "small", True)
    body = yaml.safe_dump(TINY)
    pad = "# " + "x" * 62 + "\n"
    put("1mib-comments", body + pad * ((2**20 - len(body) - 1) // len(pad)), "small", True)
    args = "".join(f"  k{i}: {i}\n" for i in range(60_000))
    put("1mib-args", body.replace("engine_args:\n", "engine_args:\n" + args[: 2**20 - len(body) - 100]
                                  .rsplit("\n", 1)[0] + "\n"), "small", False)
    put("args-under", yaml.safe_dump(tiny_spec(engine={"kv_cache_dtype": "auto", "block_size": [32, 64]},
                                           engine_args={"hf_overrides": {f"k{i}": i for i in range(45_000)}}
                                           | TINY["engine_args"])), "small", True)
    lines = ["name: lol", "model: tiny-llama-gqa", "engine_args:", "  a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, c in zip("abcdefghi", "bcdefghij", strict=True):
        lines.append(f"  {c}: &{c} [" + ", ".join([f"*{prev}"] * 10) + "]")
    put("alias-bomb", "\n".join(lines) + "\n", "small", False)
    put("deep-nesting", body.replace("engine_args:\n", "engine_args:\n  deep: " + "[" * 100_000 + "]" * 100_000
                                     + "\n"), "small", False)
    put("long-list", yaml.safe_dump(tiny_spec(engine={"max_model_len": 8192, "block_size": 32, "kv_cache_dtype": "auto",
                                                  "kv_cache_memory_bytes": "8GiB", "max_num_seqs": None},
                                          workload={"concurrency": 1, "prompt_len": list(range(1, 99_001)),
                                                    "output_len": 16}, phases=["capacity", "decode"])),
        "grid", True)
    put("max-points", yaml.safe_dump(tiny_spec(engine={"max_model_len": 2048, "block_size": 32,
                                                       "kv_cache_dtype": "auto",
                                                   "kv_cache_memory_bytes": "8GiB", "max_num_seqs": None},
                                           workload={"concurrency": list(range(1, 101)),
                                                     "prompt_len": list(range(1, 101)),
                                                     "output_len": list(range(1, 11))},
                                           phases=["capacity", "decode"])), "grid", True)
    put("max-grid", yaml.safe_dump(tiny_spec(engine={"max_model_len": list(range(1024, 1024 + 5000)),
                                                 "block_size": [32, 64], "kv_cache_dtype": "auto",
                                                 "kv_cache_memory_bytes": "1GiB"},
                                         workload={"concurrency": [1, 2], "prompt_len": [16, 32, 48, 64, 80],
                                                   "output_len": 16},
                                         phases=["capacity", "decode"])), "grid", True)
    put("max-dropped", yaml.safe_dump(tiny_spec(engine={"max_model_len": 1024, "block_size": 32,
                                                        "kv_cache_dtype": "auto",
                                                    "max_num_seqs": 1},
                                            workload={"concurrency": list(range(1, 101)),
                                                      "prompt_len": list(range(1, 1001)), "output_len": 1},
                                            phases=["capacity", "decode"])), "grid", True)
    put("over-cap", yaml.safe_dump(tiny_spec(engine={"block_size": 32, "kv_cache_dtype": "auto"},
                                         workload={"concurrency": list(range(1, 1001)),
                                                   "prompt_len": list(range(1, 1001)),
                                                   "output_len": list(range(1, 1001))}, phases=["decode"])),
        "small", False)
    return out


def measure(args: list[str]) -> tuple[float, float, int, int]:
    """(wall seconds, peak RSS in MB, exit code, bytes written to stdout) of `kvprof ARGS` in its own process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "profiler.cli", *args], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0, os.SEEK_END)
        return wall, usage.ru_maxrss * 1024 / MB, proc.returncode, out.tell()


def manifest_bytes(path: Path) -> tuple[int, int]:
    """(dropped combinations, bytes of manifest.json recording them) for the spec's plan."""
    sys.path.insert(0, str(ROOT))
    from analysis.results.schema import Manifest
    from profiler.preflight import validate

    _, plan = validate(path, platform="cpu")
    return len(plan.dropped), len(Manifest(name="m", status="running", dropped=plan.dropped).to_json())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", help="run only these inputs (repeatable)")
    ns = ap.parse_args()
    over = []
    with tempfile.TemporaryDirectory(prefix="kvprof-hostile-") as tmp:
        cases = inputs(Path(tmp))
        print(f"{'input':<14} {'KiB':>6}  {'command':<26} {'exit':>4} {'seconds':>8} {'peak MB':>8} "
              f"{'stdout KB':>9}  bound")
        for name, (path, size, valid) in cases.items():
            if ns.only and name not in ns.only:
                continue
            commands = [("validate", ["validate", "--platform", "cpu", str(path)]),
                        ("sweep --dry-run", ["sweep", "--dry-run", "--platform", "cpu", str(path)]),
                        ("sweep --dry-run --json", ["sweep", "--dry-run", "--platform", "cpu", "--json", str(path)])]
            if name == "max-grid":
                commands.append(("dry-run --gpu h100-sxm", ["sweep", "--dry-run", "--gpu", "h100-sxm", str(path)]))
            for label, args in commands:
                bound = SMALL if size == "small" else GRID_GPU if "--gpu" in label else GRID
                wall, rss, rc, written = measure(args)
                ok = wall <= bound[0] and rss <= bound[1] and rc == (0 if valid else 2)
                if not ok:
                    over.append(f"{name} {label}")
                print(f"{name:<14} {path.stat().st_size / 1024:>6,.0f}  {label:<26} {rc:>4} {wall:>8.2f} "
                      f"{rss:>8.0f} {written / 1000:>9,.1f}  ≤ {bound[0]:g} s, {bound[1]} MB"
                      + ("" if ok else "  OVER" + (" (exit code)" if rc != (0 if valid else 2) else "")))
        if not ns.only or "max-dropped" in ns.only:
            n, size = manifest_bytes(cases["max-dropped"][0])
            ok = size <= MANIFEST_MB * MB
            over += [] if ok else ["max-dropped manifest.json"]
            print(f"manifest.json of max-dropped records all {n:,} dropped combinations in {size / MB:.1f} MB"
                  f"  ≤ {MANIFEST_MB} MB" + ("" if ok else "  OVER"))
    print("all within bounds" if not over else f"over bounds: {', '.join(over)}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
