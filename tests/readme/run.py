#!/usr/bin/env python3
"""Runs every shell command README.md shows, in order, as a user would (CI's "README
commands" stage): a README command that no longer works fails CI.

    tests/readme/run.py [--readme README.md] [--build build] [--keep]

Each line of each ```sh block is one command (a trailing `\\` joins lines; `# ...` comments
are dropped). They run with bash in a scratch directory that links the checkout's top-level
entries, so `build/bin/...`, `./capi/python` and `benchmarks/...` resolve as in the README
while what the commands write (a venv, an install prefix, a sidecar, plots) lands in the
scratch directory. The model variable `M` the README sets points at a scratch copy of the
default model, so the sidecar `kairox-prepare` writes beside it never reaches the cached
model that the tests use. Absolute output paths (/opt/kairox, /tmp/...) are moved into the
scratch directory.

What is not run here, and why, is listed in NOT_HERE (each is run by another CI stage);
commands whose outcome depends on the machine (a CUDA GPU) are in EXPECT: without a GPU
they must fail with the documented message. Anything else must exit 0. Prints one line per
command and a count; exit 1 when any failed.
"""

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

# Commands CI runs in other stages (regex on the command -> where).
NOT_HERE = {
    r"^cmake/setup\.sh\b": ".ci/run runs cmake/setup.sh verbatim after the tests",
    r"^cmake/test\.sh\b": ".ci/run's first stage is cmake/test.sh verbatim",
    r"^build/bin/kairox-server\b": "tests/server (in cmake/test.sh) starts kairox-server and runs "
                                   "the README's curl example against it (test_readme_curl)",
    r"^curl -s http://127\.0\.0\.1:8080/": "tests/server runs it against a running server",
}

# Commands whose outcome depends on the machine: (regex, predicate for "should succeed here",
# the stderr text required when it should not).
def has_cuda_gpu():
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


EXPECT = [
    (r"--device cuda\b", has_cuda_gpu, "CUDA"),
]

# What an interactive program reads from stdin when the README starts it.
STDIN = {
    r"kairox-chat\b": "What is two plus two?\n",
}

TIMEOUT_S = 900


def sh_commands(readme_text):
    """Yields (line number, command) for each command in the ```sh blocks."""
    in_block = False
    pending, pending_line = "", 0
    for number, line in enumerate(readme_text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            in_block = (stripped == "```sh") if not in_block else False
            continue
        if not in_block:
            continue
        command = strip_comment(line).rstrip()
        if not pending:
            pending_line = number
        if command.endswith("\\"):
            pending += command[:-1] + " "
            continue
        command = (pending + command).strip()
        pending = ""
        if command:
            yield pending_line, command


def strip_comment(line):
    """Drops a `#` comment that starts outside quotes (preceded by whitespace or at the start)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    root = pathlib.Path(__file__).resolve().parents[2]
    ap.add_argument("--readme", default=str(root / "README.md"))
    ap.add_argument("--build", default=str(root / "build"))
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = ap.parse_args()

    model = subprocess.run([str(root / "cmake/fetch_model.sh")], capture_output=True, text=True,
                           check=True).stdout.strip()
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="kx-readme-"))
    try:
        for entry in root.iterdir():
            if entry.name in (".git", "build"):
                continue
            (scratch / entry.name).symlink_to(entry)
        (scratch / "build").symlink_to(pathlib.Path(args.build).resolve())
        models = scratch / "models"
        models.mkdir()
        scratch_model = models / pathlib.Path(model).name
        shutil.copyfile(model, scratch_model)
        # `kairox-perplexity -f some.txt`: a text of about 1500 tokens (the README's first
        # 6000 characters: three 512-token windows).
        (scratch / "some.txt").write_text(pathlib.Path(args.readme).read_text()[:6000])
        env = dict(os.environ, KAIROX_MODEL=str(scratch_model), TMPDIR=str(scratch / "tmp"))
        (scratch / "tmp").mkdir()

        counts = {"ok": 0, "expected failure": 0, "elsewhere": 0, "FAILED": 0}
        readme_text = pathlib.Path(args.readme).read_text()
        for number, command in sh_commands(readme_text):
            where = next((why for rx, why in NOT_HERE.items() if re.search(rx, command)), None)
            if where:
                print(f"README:{number}: elsewhere  {command}  ({where})", flush=True)
                counts["elsewhere"] += 1
                continue
            if re.match(r"^M=", command):
                env["M"] = str(scratch_model)
                print(f"README:{number}: set       M={scratch_model}", flush=True)
                continue
            run = command.replace("/opt/kairox", str(scratch / "opt/kairox"))
            run = re.sub(r"(?<![\w.])/tmp/", str(scratch / "tmp") + "/", run)
            stdin = next((text for rx, text in STDIN.items() if re.search(rx, run)), "")
            expect = next(((ok(), msg) for rx, ok, msg in EXPECT if re.search(rx, run)), (True, ""))
            start = time.monotonic()
            try:
                proc = subprocess.run(["bash", "-c", "set -o pipefail; " + run], cwd=scratch,
                                      env=env, input=stdin, capture_output=True, text=True,
                                      timeout=TIMEOUT_S)
                rc, out, err = proc.returncode, proc.stdout, proc.stderr
            except subprocess.TimeoutExpired:
                rc, out, err = None, "", f"timed out after {TIMEOUT_S} s"
            took = time.monotonic() - start
            should_succeed, required = expect
            if should_succeed and rc == 0:
                verdict = "ok"
            elif not should_succeed and rc not in (0, None) and required in err:
                verdict = "expected failure"
            else:
                verdict = "FAILED"
            counts[verdict] += 1
            print(f"README:{number}: {verdict:<9} {took:6.1f} s  {command}", flush=True)
            if verdict == "FAILED" or not should_succeed:
                why = (f"exit {rc}" if rc is not None else "timeout") + \
                      ("" if should_succeed else f" (expected a failure naming '{required}')")
                print(f"    {why}\n    stdout: {out[-1500:]!r}\n    stderr: {err[-3000:]!r}")
        print("README commands: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
        return 1 if counts["FAILED"] else 0
    finally:
        if args.keep:
            print(f"scratch kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
