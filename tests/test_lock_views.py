"""rocmlock.lock.lockfile.view (issue 40): a record's strings read from rattler once per lock run, never after it.
Inside ``record_views()`` the same record object answers from the first read; outside it (or in the next run) a
record changed since answers with its new strings, so no run sees another's or a stale one."""

from __future__ import annotations

from rattler import BuildString, PackageRecord, RepoDataRecord
from rocmlock.lock.lockfile import record_problem, record_views, view


def _record(url: str) -> RepoDataRecord:
    rec = PackageRecord("numpy", "2.1.3", BuildString("py312h0_0"), 0, "linux-64", depends=["python >=3.12"])
    return RepoDataRecord(rec, url.rsplit("/", 1)[-1], url, "https://example.org/ch/")


def test_a_view_is_read_once_within_a_run_and_afresh_after_it() -> None:
    record = _record("https://example.org/ch/linux-64/numpy-2.1.3-py312h0_0.conda")
    with record_views():
        first = view(record)
        assert (first.name, first.version, first.build, first.depends) == ("numpy", "2.1.3", "py312h0_0",
                                                                           ("python >=3.12",))
        record.url = "https://example.org/ch/linux-64/numpy-2.1.3-py312h0_0.conda#x"
        assert view(record) is first  # the run reads each record once
    assert view(record).url.endswith("#x")  # a later run reads it again
    assert record_problem(record) is not None and "url" in record_problem(record)  # type: ignore[operator]
    with record_views():
        assert view(record).url.endswith("#x") and view(record) is view(record)


def test_views_of_one_run_are_not_kept_for_the_next() -> None:
    with record_views():
        view(_record("https://example.org/ch/linux-64/numpy-2.1.3-py312h0_0.conda"))
    from rocmlock.lock import lockfile

    assert lockfile._views == []
