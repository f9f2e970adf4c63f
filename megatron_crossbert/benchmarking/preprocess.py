"""``crossbert-bench preprocess``: our preprocessor against the raw tokenizer and Megatron-LM, side by side.

Every case runs as its own subprocess on the same input and is measured from outside (rusage
of the waited-for children, see :func:`measure`): CPU-seconds are user + system time of the whole process tree (pool workers and Rust
threads included, because a process's rusage includes the children it waited for), which is what
matters on a shared machine; wall time is reported beside it. Peak RSS is the largest resident
set of any process in the tree (``ru_maxrss``), not a sum.

Cases:

- ``crossbert-preprocess --backend B`` for each backend (``auto`` resolves to gigatoken when it
  supports and matches the tokenizer);
- ``tokenizers ceiling``: :func:`raw_ceiling` in a fresh interpreter, the least work that gets the
  same ids from HF ``tokenizers``: gzip + ``json.loads`` + ``encode_batch_fast`` (N threads) +
  the ids as numpy arrays; no validation, no writing;
- with ``--megatron-lm DIR``: its ``tools/preprocess_data.py --workers N`` and
  ``tools/preprocess_data_fast.py --use-gigatoken``, run with ``DIR`` first on ``PYTHONPATH``.

With ``--datatrove-tasks N ...``: crossbert-preprocess on the input files as given, then
crossbert-preprocess-datatrove with N tasks (all at once, ``workers // N`` threads each) and
crossbert-merge of their shards, each merge compared byte for byte with that run (tasks cut the input
by files, so these cases read the files, not the combined JSONL).

The other cases read one plain ``.jsonl`` (the inputs decompressed and concatenated: Megatron-LM's tools
take one file, see :func:`combine_inputs`). The ``.bin/.idx`` of ours and of Megatron-LM's fast tool are compared byte for byte.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np


CASES = ("ceiling", "megatron-fast", "megatron-classic")


@dataclass
class PreprocessBenchOptions:
    """What ``crossbert-bench preprocess`` runs."""

    inputs: list[str]
    """JSONL(.gz) files or globs."""
    tokenizer: str
    """HF tokenizer directory (tokenizer.json), used by every case."""
    work_dir: str
    """Where the combined input and every case's outputs go (created; must not hold old outputs)."""
    workers: int = 2
    """Threads/processes for every case that takes them."""
    backends: list[str] = field(default_factory=lambda: ["auto", "tokenizers"])
    """Our backends to time."""
    megatron_lm: str | None = None
    """Megatron-LM checkout; its two preprocess tools are timed when given."""
    append_eod: bool = True
    """--append-eod for every case (Megatron-LM's usual setting)."""
    cases: tuple[str, ...] = CASES
    """Which of the other cases to run besides ours (Megatron-LM's only with ``megatron_lm``)."""
    datatrove_tasks: tuple[int, ...] = ()
    """Also time crossbert-preprocess-datatrove with each of these task counts (``workers // tasks`` threads
    per task, all tasks at once) and the merge, beside crossbert-preprocess, all on the input files as given."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        unknown = set(self.cases) - set(CASES)
        if unknown:
            raise ValueError(f"unknown cases {sorted(unknown)}; choose from {', '.join(CASES)}")
        if self.megatron_lm and not (Path(self.megatron_lm) / "tools" / "preprocess_data.py").is_file():
            raise ValueError(f"{self.megatron_lm}: not a Megatron-LM checkout (no tools/preprocess_data.py)")


@dataclass
class CaseResult:
    """One timed case."""

    name: str
    cpu_s: float
    wall_s: float
    peak_rss_mb: float
    mb_per_s: float
    rc: int
    note: str = ""


def combine_inputs(patterns: list[str], out: Path) -> tuple[Path, int]:
    """One plain JSONL file holding every input, decompressed; returns it and its size in bytes.

    Plain, because Megatron-LM's ``preprocess_data.py`` opens its input as text (no gzip), and
    gigatoken 0.10's ``JsonlFileSource`` (the fast tool's reader) stops after the first member of a
    multi-member gzip file, silently dropping the rest.
    """
    files = [f for p in patterns for f in (sorted(glob.glob(p)) if glob.has_magic(p) else [p])]
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as sink:
        for name in files:
            with (gzip.open(name, "rb") if name.endswith(".gz") else open(name, "rb")) as source:
                while block := source.read(1 << 24):
                    sink.write(block)
    return out, out.stat().st_size


_LAUNCHER = (
    "import ctypes, json, os, resource, subprocess, sys\n"
    "ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)\n"  # PR_SET_CHILD_SUBREAPER
    "proc, rc = subprocess.Popen(sys.argv[2:]), 1\n"
    "while True:\n"
    "    try:\n"
    "        pid, status, _ = os.wait4(-1, 0)\n"
    "    except ChildProcessError:\n"
    "        break\n"
    "    rc = os.waitstatus_to_exitcode(status) if pid == proc.pid else rc\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "open(sys.argv[1], 'w').write(json.dumps({'rc': rc, "
    "'cpu_s': usage.ru_utime + usage.ru_stime, 'maxrss_kb': usage.ru_maxrss}))\n"
)
"""Runs the command from a small interpreter: a child's ``ru_maxrss`` includes the RSS of the process
it was forked from (the kernel keeps the pre-exec high-water mark), so forking straight from a large
process (pytest with torch loaded) would report that process's size instead of the command's. The
interpreter is a child subreaper and reaps every process of the tree: a process its parent never
waits for (datatrove's forkserver, whose children are its tasks) is reparented to it and counted."""


def measure(name: str, cmd: list[str], nbytes: int, env: dict | None = None, cwd: str | None = None) -> CaseResult:
    """Run ``cmd`` to completion: CPU of its whole process tree, wall, and peak RSS (``wait4`` rusage)."""
    import tempfile

    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        start = time.perf_counter()
        run = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, out.name, *cmd], env=env, cwd=cwd,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
        wall = time.perf_counter() - start
        usage = json.loads(out.read() or '{"rc": %d, "cpu_s": 0, "maxrss_kb": 0}' % run.returncode)
    err = run.stderr.strip()
    note = "" if usage["rc"] == 0 else (err.splitlines()[-1][:160] if err else f"exit {usage['rc']}")
    return CaseResult(name, round(usage["cpu_s"], 2), round(wall, 2), round(usage["maxrss_kb"] / 1024, 1),
                      round(nbytes / 1e6 / wall, 2), usage["rc"], note)


def raw_ceiling(path: str, tokenizer: str, threads: int, batch: int = 4096) -> int:
    """The tokenizers ceiling: read + parse + ``encode_batch_fast`` + ids to numpy; returns tokens."""
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(Path(tokenizer) / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    total, texts = 0, []
    with (gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")) as handle:
        for line in handle:
            texts.append(json.loads(line)["text"])
            if len(texts) == batch:
                total += _encode_count(tok, texts)
                texts = []
    return total + (_encode_count(tok, texts) if texts else 0)


def _encode_count(tok, texts: list[str]) -> int:
    ids = [enc.ids for enc in tok.encode_batch_fast(texts, add_special_tokens=False)]
    return sum(np.asarray(i, dtype=np.int64).size for i in ids)


def _ours(opts: PreprocessBenchOptions, corpus: Path, backend: str) -> tuple[list[str], dict, str]:
    prefix = str(Path(opts.work_dir) / f"ours_{backend}")
    cmd = [sys.executable, "-m", "megatron_crossbert.cli.preprocess", "--input", str(corpus), "--output-prefix",
           prefix, "--tokenizer", opts.tokenizer, "--workers", str(opts.workers), "--backend", backend,
           "--no-progress", *(["--append-eod"] if opts.append_eod else [])]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return cmd, env, prefix + "_text_document"


def _megatron(opts: PreprocessBenchOptions, corpus: Path, fast: bool) -> tuple[list[str], dict, str]:
    tool = "preprocess_data_fast.py" if fast else "preprocess_data.py"
    prefix = str(Path(opts.work_dir) / ("mlm_fast" if fast else "mlm_classic"))
    cmd = [sys.executable, str(Path(opts.megatron_lm) / "tools" / tool), "--input", str(corpus), "--output-prefix",
           prefix, "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", opts.tokenizer,
           *(["--append-eod"] if opts.append_eod else []),
           *(["--use-gigatoken"] if fast else ["--workers", str(opts.workers)])]
    env = dict(os.environ, PYTHONPATH=str(Path(opts.megatron_lm).resolve()))
    return cmd, env, prefix + "_text_document"


def _module_case(module: str, *args: str) -> tuple[list[str], dict]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return [sys.executable, "-m", f"megatron_crossbert.cli.{module}", *args], env


def _datatrove(opts: PreprocessBenchOptions, nbytes: int) -> tuple[list[CaseResult], dict[str, bool]]:
    """crossbert-preprocess on the files as given, then N datatrove tasks and their merge (N = 1: the one
    task's output), each compared byte for byte with the single run."""
    files = [f for p in opts.inputs for f in (sorted(glob.glob(p)) if glob.has_magic(p) else [p])]
    work, eod = Path(opts.work_dir), ["--append-eod"] if opts.append_eod else []
    common = ["--input", *files, "--tokenizer", opts.tokenizer, *eod]
    cmd, env = _module_case("preprocess", *common, "--output-prefix", str(work / "files"),
                            "--workers", str(opts.workers), "--no-progress")
    results = [measure(f"crossbert-preprocess on the {len(files)} files, {opts.workers} threads", cmd, nbytes, env)]
    identical = {}
    for tasks in opts.datatrove_tasks:
        threads, out = max(1, opts.workers // tasks), work / f"datatrove_{tasks}"
        cmd, env = _module_case("preprocess_datatrove", *common, "--output-dir", str(out / "shards"), "--tasks",
                                str(tasks), "--parallel-tasks", str(tasks), "--workers", str(threads))
        results.append(measure(f"datatrove, {tasks} task(s) x {threads} thread(s)", cmd, nbytes, env))
        cmd, env = _module_case("merge", "--input", str(out / "shards"), "--output-prefix", str(out / "merged"),
                                "--no-progress")
        results.append(measure(f"crossbert-merge of the {tasks} task(s)", cmd, nbytes, env))
        identical[f"datatrove {tasks} task(s), merged"] = same_files(str(out / "merged"), str(work / "files_text_document"))
    return results, identical


def same_files(a: str, b: str) -> bool:
    """Whether two .bin/.idx pairs are byte-identical."""
    return all(Path(a + ext).is_file() and Path(b + ext).is_file()
               and Path(a + ext).read_bytes() == Path(b + ext).read_bytes() for ext in (".bin", ".idx"))


def run_preprocess_bench(opts: PreprocessBenchOptions) -> dict:
    """Time every case once, in a fixed order; returns the JSON report."""
    corpus, nbytes = combine_inputs(opts.inputs, Path(opts.work_dir) / "combined.jsonl")
    results, prefixes = [], {}
    for backend in opts.backends:
        cmd, env, prefixes[f"ours {backend}"] = _ours(opts, corpus, backend)
        results.append(measure(f"crossbert-preprocess --backend {backend}", cmd, nbytes, env))
    if "ceiling" in opts.cases:
        ceiling = [sys.executable, "-c", "from megatron_crossbert.benchmarking.preprocess import raw_ceiling; "
                   f"raw_ceiling({str(corpus)!r}, {opts.tokenizer!r}, {opts.workers})"]
        results.append(measure(f"tokenizers encode_batch_fast ceiling ({opts.workers} threads)", ceiling, nbytes,
                               dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))))
    tools = [fast for fast in (True, False) if ("megatron-fast" if fast else "megatron-classic") in opts.cases]
    if opts.megatron_lm:
        for fast in tools:
            cmd, env, prefixes["mlm fast" if fast else "mlm classic"] = _megatron(opts, corpus, fast)
            name = "Megatron-LM preprocess_data_fast.py" if fast else f"Megatron-LM preprocess_data.py --workers {opts.workers}"
            results.append(measure(name, cmd, nbytes, env, cwd=opts.megatron_lm))
    identical = {name: same_files(prefix, prefixes["mlm fast"]) for name, prefix in prefixes.items()
                 if name.startswith("ours") and "mlm fast" in prefixes}
    sharded, identical_sharded = _datatrove(opts, nbytes) if opts.datatrove_tasks else ([], {})
    return {"input_bytes": nbytes, "workers": opts.workers, "tokenizer": opts.tokenizer,
            "cores": os.cpu_count(), "load_avg": os.getloadavg(), "cases": [asdict(r) for r in results + sharded],
            "identical_to_megatron_fast": identical, "identical_to_crossbert_preprocess": identical_sharded,
            "harness_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def preprocess_markdown(report: dict) -> str:
    """The side-by-side table (CPU-s first: the machines are shared, wall depends on the load)."""
    rows = ["| case | CPU-s | wall s | MB/s | peak RSS MB | rc |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for c in report["cases"]:
        rows.append(f"| {c['name']} | {c['cpu_s']} | {c['wall_s']} | {c['mb_per_s']} | {c['peak_rss_mb']} | "
                    f"{c['rc']}{' ' + c['note'] if c['note'] else ''} |")
    lines = [f"input: {report['input_bytes'] / 1e6:.1f} MB of JSONL, {report['cores']} cores, "
             f"load {', '.join(f'{x:.1f}' for x in report['load_avg'])}", "", *rows]
    for name, same in report["identical_to_megatron_fast"].items():
        lines.append(f"\n{name} .bin/.idx byte-identical to Megatron-LM preprocess_data_fast.py: {same}")
    for name, same in report.get("identical_to_crossbert_preprocess", {}).items():
        lines.append(f"\n{name}: .bin/.idx byte-identical to crossbert-preprocess on the same files: {same}")
    return "\n".join(lines)
