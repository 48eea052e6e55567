"""The judgement of SQLite TCL runs (tests/sqlite-tcl/expected.py) against
the real expected-differences.txt: invented wrong results of every kind the
list must not excuse are flagged, and what it lists is excused only with the
listed value. No testfixture needed: results are made up here.

Also: tester.tcl's output is parsed into every failure with what it printed
and the rounds of each fault loop, the file format round-trips, and
regenerate() records values in place (stock's alike under `stock`, new
failures under `unfiled`, never excused).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sqlite-tcl"))

import expected  # noqa: E402
import tclsuite  # noqa: E402

LIST = expected.load()


def result(file: str, variant: str, failures: List[Tuple[str, str]],
           rounds: Optional[dict] = None,
           status: str = tclsuite.COMPLETE) -> tclsuite.FileResult:
    return tclsuite.FileResult(
        file=file, variant=variant, status=status, errors=len(failures),
        tests=1000, failures=failures, rounds=rounds or {}, returncode=0,
        seconds=1.0, last_case=failures[-1][0] if failures else None)


def listed(file: str, case: str, variant: str) -> List[str]:
    """The exact values the list holds for a case (the test needs '=' lines)."""
    hit = LIST.lookup(file, case, variant)
    assert hit is not None, f"{file} {case} [{variant}] is not listed any more"
    assert all(e.op == "=" for e in hit[1])
    return [e.value for e in hit[1]]


def judged(waldio: tclsuite.FileResult,
           stock: Optional[tclsuite.FileResult] = None) -> expected.Verdict:
    ref = tclsuite.reference_of(waldio.variant)
    return expected.judge(waldio, stock or result(waldio.file, ref, []), LIST)


def as_listed(file: str, variant: str, *cases: str) -> List[Tuple[str, str]]:
    return [(c, v) for c in cases for v in listed(file, c, variant)]


# ---------------------------------------------- invented wrong results

WRONG = {
    # wal5 4.N.4: the rows after a TRUNCATE checkpoint (4.N.3 is listed:
    # the -wal size) -- two rows lost.
    "rows missing after a TRUNCATE checkpoint":
        ("wal5.test", "default", "wal5-capi-4.1.4", "got: [1 2]"),
    # wal5 5.N.6: a FULL checkpoint while a reader holds a snapshot must
    # return SQLITE_BUSY (1 10 10).
    "a FULL checkpoint that does not return busy":
        ("wal5.test", "default", "wal5-pragma-5.1.6", "got: [0 10 10]"),
    # pageropt-1.5 is listed with its blob: a different blob.
    "a wrong blob in pageropt":
        ("pageropt.test", "default", "pageropt-1.5", "got: [7 0 0 9F07E7BE]"),
    # walcksum-1.big.8.3 is listed (got: [1]): rows lost after recovery.
    "lost rows in walcksum":
        ("walcksum.test", "default", "walcksum-1.big.8.3", "got: [0]"),
    # wal2-7.1.3 is listed with SQLITE_CORRUPT's message.
    "a different error code":
        ("wal2.test", "default", "wal2-7.1.3", "Error: disk I/O error"),
    # A wal case that passes today, failing with an I/O error.
    "a case that passes today":
        ("wal.test", "default", "wal-1.1", "Error: disk I/O error"),
}


@pytest.mark.parametrize("kind", sorted(WRONG))
def test_an_invented_wrong_result_is_flagged(kind: str) -> None:
    file, variant, case, got = WRONG[kind]
    others = [c for c in LIST.listed(file, variant) if c != case][:5]
    v = judged(result(file, variant, as_listed(file, variant, *others)
                      + [(case, got)]))
    assert list(v.unexpected) == [case], v.unexpected
    assert not v.ok


@pytest.mark.parametrize("kind", sorted(k for k, (f, v, c, _) in WRONG.items()
                                         if LIST.lookup(f, c, v)))
def test_the_listed_value_itself_is_excused(kind: str) -> None:
    """The control: the same cases printing what the list says pass (so the
    test above flags the value, not the name). The other kinds' cases are
    not listed at all: any failure of theirs is flagged."""
    file, variant, case, _ = WRONG[kind]
    v = judged(result(file, variant, as_listed(file, variant, case)))
    assert v.ok and v.expected == [case]


def test_a_listed_case_that_fails_twice_needs_both_lines() -> None:
    file, variant, case = "wal5.test", "pad4k", "wal5-capi-4.1.3"
    once = as_listed(file, variant, case)
    assert not judged(result(file, variant, once + once)).ok


def test_a_case_listed_for_another_variant_is_flagged() -> None:
    # incrvacuum2's entries are for `default` only (the plan runs it there):
    # the same values in another variant are not excused.
    failures = as_listed("incrvacuum2.test", "default", "incrvacuum2-4.2.1")
    v = judged(result("incrvacuum2.test", "pad4k", failures))
    assert list(v.unexpected) == ["incrvacuum2-4.2.1"]


def stock_entry() -> Tuple[str, str, str]:
    for (file, case, variant), (block, entries) in sorted(LIST.index.items()):
        if block.group == "stock" and all(e.op == "=" for e in entries):
            return file, case, variant
    raise AssertionError("no stock entry left in the list")


def test_a_stock_shared_failure_with_another_value_on_stock_is_flagged() -> None:
    file, case, variant = stock_entry()
    mine = as_listed(file, variant, case)
    ref = tclsuite.reference_of(variant)
    same = judged(result(file, variant, mine), result(file, ref, mine))
    assert same.ok and same.also_stock == [case]
    other = [(c, g + " (stock)") for c, g in mine]
    v = judged(result(file, variant, mine), result(file, ref, other))
    assert list(v.unexpected) == [case] and "stock prints" in v.unexpected[case]
    # Not run at all: not excused either.
    v = judged(result(file, variant, mine), tclsuite.not_run(file, ref))
    assert list(v.unexpected) == [case]


def test_a_stock_shared_failure_with_another_value_through_waldio_is_flagged() -> None:
    file, case, variant = stock_entry()
    ref = tclsuite.reference_of(variant)
    wrong = [(case, "got: [something else]")]
    v = judged(result(file, variant, wrong), result(file, ref, wrong))
    assert list(v.unexpected) == [case]


def test_fewer_fault_rounds_are_flagged_unless_listed_exactly() -> None:
    loop = "walfault-1-ioerr-transient"
    v = judged(result("walfault.test", "default", [], {loop: 20}),
               result("walfault.test", "stock", [], {loop: 30}))
    assert list(v.unexpected) == [f"<rounds:{loop}>"]
    # Listed loops: the listed numbers only.
    file, variant = "walfault2.test", "pad4k"
    case = "<rounds:walfault2-1-full>"
    got = listed(file, case, variant)[0]            # "N rounds (stock M)"
    n, m = int(got.split()[0]), int(got.split()[-1].rstrip(")"))
    ok = judged(result(file, variant, [], {"walfault2-1-full": n}),
                result(file, "stock", [], {"walfault2-1-full": m}))
    assert ok.ok, ok.unexpected
    fewer = judged(result(file, variant, [], {"walfault2-1-full": n - 1}),
                   result(file, "stock", [], {"walfault2-1-full": m}))
    assert list(fewer.unexpected) == [case]


def test_an_early_end_is_flagged_unless_listed_exactly() -> None:
    v = judged(result("wal.test", "default", [("wal-1.1", "Error: x")],
                      status=tclsuite.SIGNAL))
    assert "<end>" in v.unexpected and not v.ok
    timeout = judged(result("walro.test", "default-user",
                            as_listed("walro.test", "default-user",
                                      "walro-1.3.2.1", "walro-1.3.2.2"),
                            status=tclsuite.TIMEOUT))
    assert "<end>" in timeout.unexpected


def test_a_listed_case_that_passes_is_stale() -> None:
    v = judged(result("incrvacuum2.test", "default",
                      as_listed("incrvacuum2.test", "default", "incrvacuum2-4.2.1")))
    assert "incrvacuum2-4.3" in v.stale and v.ok


def test_every_entry_names_one_case_and_a_value() -> None:
    """No globs, and every value narrower than anything: a `~` pattern must
    not match a made-up different value of the same shape."""
    for e in LIST.entries:
        assert not any(ch in e.case for ch in "*?["), e
        assert e.op == "=" or not e.accepts("got: [0]"), e


# ------------------------------------------------------ parsing, format

OUTPUT = """\
wal-1.1... Ok
wal-1.2...
! wal-1.2 expected: [1]
! wal-1.2 got:      [2
3]
wal-1.3...
Error: database disk image is malformed
walfault-2-ioerr-transient.1... Ok
walfault-2-ioerr-transient.2... Ok
walfault-2-ioerr-transient.3... Ok
wal-1.2...
! wal-1.2 expected: [1]
! wal-1.2 got:      [4]
3 errors out of 7 tests on vm Linux 64-bit little-endian
!Failures on these tests: wal-1.2 wal-1.3 wal-1.2
"""


def test_every_failure_is_parsed_with_what_it_printed() -> None:
    p = tclsuite.parse_output(OUTPUT)
    assert p["failures"] == [("wal-1.2", "got: [2\n3]"),
                             ("wal-1.3", "Error: database disk image is malformed"),
                             ("wal-1.2", "got: [4]")]
    assert p["rounds"] == {"walfault-2-ioerr-transient": 3}
    assert (p["errors"], p["tests"]) == (3, 7)


def test_values_round_trip_through_the_file() -> None:
    value = "got: [a\\b\n\tc  ]  "
    lst = expected.parse("reason wal-size  why\n"
                         + expected.Entry("x.test", "x-1", ("default",), "=",
                                          value).line() + "\n")
    assert lst.entries[0].value == value
    assert expected.parse(lst.text()).text() == lst.text()


def test_regenerate_records_values_in_place() -> None:
    old = expected.parse(
        "# header\n\nreason wal-size  a reason\n"
        "  x.test  x-1  default,pad4k  = got: [1]\n"
        "  x.test  x-2  default  = got: [7]\n")
    waldio = result("x.test", "default", [("x-1", "got: [2]"), ("x-3", "got: [3]"),
                                          ("x-4", "got: [4]")])
    stock = result("x.test", "stock", [("x-4", "got: [4]")])
    new = expected.regenerate(old, [waldio, stock])
    assert new.header == ["# header"]
    # x-1: new value for default, pad4k (not run) kept; x-2 no longer fails.
    assert new.lookup("x.test", "x-1", "default")[1][0].value == "got: [2]"
    assert new.lookup("x.test", "x-1", "pad4k")[1][0].value == "got: [1]"
    assert new.lookup("x.test", "x-2", "default") is None
    assert new.lookup("x.test", "x-3", "default")[0].group == "unfiled"
    assert new.lookup("x.test", "x-4", "default")[0].group == "stock"
    v = expected.judge(waldio, stock, new)
    assert list(v.unexpected) == ["x-3"]        # unfiled is never excused


def test_a_loop_listed_with_a_pattern_may_reach_stock_but_not_fall_further() -> None:
    """walfault-9's OOM loop moves by a round or so between runs: listed with
    a range, a run at stock's count is fine; one far below it is flagged."""
    file, variant, loop = "walfault.test", "default", "walfault-9-oom-persistent"
    case = f"<rounds:{loop}>"
    hit = LIST.lookup(file, case, variant)
    assert hit is not None and all(e.op == "~" for e in hit[1])
    same = judged(result(file, variant, [], {loop: 378}),
                  result(file, "stock", [], {loop: 378}))
    assert same.ok and case not in same.stale
    listed_value = judged(result(file, variant, [], {loop: 375}),
                          result(file, "stock", [], {loop: 378}))
    assert listed_value.ok, listed_value.unexpected
    far = judged(result(file, variant, [], {loop: 300}),
                 result(file, "stock", [], {loop: 378}))
    assert list(far.unexpected) == [case]


def test_a_poisoned_round_may_pass_but_not_print_otherwise() -> None:
    """The round whose fault hits the log's flush moved once in CI (no
    transient round of walfault-15 failed): a listed poisoned round that
    passes is not stale; failing, it must still print its listed value
    (a passing case of another group is stale:
    test_a_listed_case_that_passes_is_stale)."""
    file, variant = "walfault.test", "default"
    case = "walfault-15-ioerr-transient.14"
    assert LIST.lookup(file, case, variant)[0].group == "poisoned"
    others = [c for c in LIST.listed(file, variant)
              if c != case and not c.startswith("<")]
    passed = judged(result(file, variant, as_listed(file, variant, *others)))
    assert passed.ok and case not in passed.stale, passed.stale
    wrong = judged(result(file, variant, as_listed(file, variant, *others)
                          + [(case, "got: [1 {database is locked}]")]))
    assert case in wrong.unexpected
