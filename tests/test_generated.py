"""Generated files are what their committed generators print today:
  - src/check/schema_data.c: tools/gen_schemas.py run again (ONNX 1.23 changelogs in ../shared, checked against
    python3-onnx 1.12, which the generator fails on any unexplained difference) into a scratch file, byte for byte;
  - tests/test_fl_aggregate.c's FedAdam/FedYogi reference arrays: the lines tools/fl_adaptive_reference.py prints.
A difference names the first differing line and the command that regenerates the file.
"""
import difflib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from testlib import check  # noqa: E402


def first_difference(want, got, name):
    diff = list(difflib.unified_diff(want.splitlines(), got.splitlines(), f"{name} (committed)", f"{name} (now)",
                                     n=0, lineterm=""))
    return "\n".join(diff[:12])


def check_schemas(work):
    committed = os.path.join(tl.SRC, "src", "check", "schema_data.c")
    fresh = os.path.join(work, "schema_data.c")
    r = tl.run([sys.executable, os.path.join(tl.SRC, "tools", "gen_schemas.py"), fresh], echo="fail")
    check(r.returncode == 0, "tools/gen_schemas.py ran")
    if r.returncode != 0:
        return
    want, got = open(committed).read(), open(fresh).read()
    if want != got:
        print(first_difference(want, got, "src/check/schema_data.c"))
        print("regenerate it with: /usr/bin/python3 tools/gen_schemas.py")
    check(want == got, f"src/check/schema_data.c ({len(want.splitlines())} lines) equals gen_schemas.py's output")


def check_fl_reference():
    r = tl.run([sys.executable, os.path.join(tl.SRC, "tools", "fl_adaptive_reference.py")], echo="fail")
    check(r.returncode == 0, "tools/fl_adaptive_reference.py ran")
    lines = r.stdout.splitlines()
    test = [ln.strip() for ln in open(os.path.join(tl.SRC, "tests", "test_fl_aggregate.c"))]
    missing = [ln for ln in lines if ln not in test]
    for ln in missing:
        print("not in tests/test_fl_aggregate.c: " + ln)
    check(len(lines) == 4 and not missing,
          f"test_fl_aggregate.c holds the {len(lines)} FedAdam/FedYogi arrays fl_adaptive_reference.py prints")


def main():
    work = tl.work_dir("generated")
    os.makedirs(work, exist_ok=True)
    check_schemas(work)
    check_fl_reference()
    return tl.finish("test_generated")


if __name__ == "__main__":
    sys.exit(main())
