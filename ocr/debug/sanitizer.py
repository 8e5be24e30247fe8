"""Run a command under NVIDIA compute-sanitizer, save the report and summarise the first error.

``python -m ocr.debug.sanitizer --tool memcheck --report FILE -- <python args...>``: output shown live
and saved to ``FILE``; exit 0 for 0 errors and success, 1 otherwise, 127 without compute-sanitizer.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from ocr.utils.io import atomic_write_text

__all__ = ["SanitizerSummary", "find_compute_sanitizer", "main", "run_sanitizer", "summarize_report"]

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
EXIT_NOT_FOUND = 127
SANITIZER_ERROR_EXITCODE = 86
HOW_TO_GET = (
    "compute-sanitizer was not found (looked at $COMPUTE_SANITIZER, PATH, $CUDA_HOME/bin, "
    "/usr/local/cuda*/bin and the nvidia wheels in this environment). It ships with the CUDA toolkit, not "
    "with the torch wheels: install the toolkit (https://developer.nvidia.com/cuda-downloads; under WSL2 use "
    "the 'WSL-Ubuntu' installer, which has no driver), or the pip wheel matching torch's CUDA major version: "
    "`uv pip install nvidia-cuda-sanitizer-api` (CUDA 13) / `nvidia-cuda-sanitizer-api-cu12` (CUDA 12), or "
    "point COMPUTE_SANITIZER at the binary."
)
_ERROR_LINE = re.compile(
    r"^=========\s(?!\s)(?!COMPUTE-SANITIZER|ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY)(\S.*)$"
)
_AT_LINE = re.compile(
    r"^=========\s+at\s+(?:0x[0-9a-f]+\s+in\s+)?(?P<where>.+?)(?:\+0x[0-9a-f]+)?(?:\s+in\s+\S+)?$"
)
_ASSERT_LINE = re.compile(
    r"(?P<file>\S+:\d+): (?P<kernel>[\w:<>]+): block: \[[\d,]+\], thread: \[[\d,]+\] Assertion (?P<cond>.+)"
)
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


@dataclass(frozen=True)
class SanitizerSummary:
    """Error count from the report's summary line; the first error and the kernel it names."""

    errors: int | None
    first_error: str | None
    kernel: str | None

    def describe(self) -> str:
        if self.errors is None:
            return "no ERROR SUMMARY line: the sanitizer or the program did not finish (see the report)"
        if self.errors == 0 and self.first_error is None:
            return "0 errors"
        kernel = f"; kernel: {self.kernel}" if self.kernel else ""
        return f"{self.errors} error(s); first: {self.first_error}{kernel}"


def find_compute_sanitizer() -> Path | None:
    """The compute-sanitizer binary, or ``None``."""
    candidates = [os.environ.get("COMPUTE_SANITIZER"), shutil.which("compute-sanitizer")]
    cuda_homes = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda", "/opt/cuda"]
    cuda_homes += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for home in filter(None, cuda_homes):
        candidates += [f"{home}/bin/compute-sanitizer", f"{home}/compute-sanitizer/compute-sanitizer"]
    site = sysconfig.get_paths()["purelib"]
    candidates += sorted(glob.glob(f"{site}/nvidia/*/bin/compute-sanitizer"), reverse=True)
    candidates += glob.glob(f"{site}/nvidia/cuda_sanitizer_api/compute-sanitizer/compute-sanitizer")
    for candidate in filter(None, candidates):
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def summarize_report(text: str) -> SanitizerSummary:
    """Parse compute-sanitizer output (with the program's own output interleaved)."""
    lines = text.splitlines()
    counts = [int(m.group(1)) for m in map(_SUMMARY.search, lines) if m]
    first, kernel = None, None
    for index, line in enumerate(lines):
        match = _ERROR_LINE.match(line)
        if match and first is None:
            first = match.group(1).strip()
            for follow in lines[index + 1 : index + 4]:
                at = _AT_LINE.match(follow)
                if at:
                    kernel = at.group("where").strip()
                    break
    assertion = next((m for m in map(_ASSERT_LINE.search, lines) if m), None)
    if assertion and kernel is None:
        where = f"device assert {assertion.group('cond')} at {assertion.group('file')}"
        kernel = f"{assertion.group('kernel')} ({where})"
    return SanitizerSummary(errors=counts[-1] if counts else None, first_error=first, kernel=kernel)


def run_sanitizer(tool: str, command: list[str], report: Path) -> int:
    """Run ``command`` under ``compute-sanitizer --tool tool``, tee its output to ``report``; returns 0 for a
    clean run, 1 when errors were reported or the program failed, 127 without the sanitizer."""
    if tool not in TOOLS:
        raise ValueError(f"tool: expected one of {TOOLS}, got {tool!r}")
    binary = find_compute_sanitizer()
    if binary is None:
        sys.stderr.write(HOW_TO_GET + "\n")
        return EXIT_NOT_FOUND
    full = [str(binary), "--tool", tool, "--error-exitcode", str(SANITIZER_ERROR_EXITCODE)]
    full += ["--show-backtrace", "yes", "--print-limit", "100", *command]
    sys.stdout.write(f"running: {' '.join(full)}\nreport: {report}\n")
    sys.stdout.flush()
    captured: list[str] = []
    with subprocess.Popen(
        full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            captured.append(line)
    summary = summarize_report("".join(captured))
    verdict = f"compute-sanitizer {tool}: {summary.describe()} (exit {proc.returncode})"
    atomic_write_text(report, "".join(captured) + f"\n{verdict}\n")
    sys.stdout.write(f"\n{verdict}\nreport: {report}\n")
    clean = proc.returncode == 0 and summary.errors == 0
    return 0 if clean else 1


def main(argv: list[str] | None = None) -> int:
    """CLI: ``--tool T --report FILE -- <arguments for this Python interpreter>``."""
    parser = argparse.ArgumentParser(
        prog="python -m ocr.debug.sanitizer",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--tool", choices=TOOLS, default="memcheck")
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument(
        "python_args", nargs=argparse.REMAINDER, help="after --: script/module and its arguments"
    )
    args = parser.parse_args(argv)
    python_args = args.python_args[1:] if args.python_args[:1] == ["--"] else args.python_args
    if not python_args:
        parser.error("nothing to run: give the Python arguments after --")
    return run_sanitizer(args.tool, [sys.executable, *python_args], args.report)


if __name__ == "__main__":
    sys.exit(main())
