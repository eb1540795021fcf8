"""analysis/lockwaits.py, and its advice in words (output/text/explain_advice.py), on
hand-made lock_waits rows (no BPF, no root). Buckets and sizes are checked with
the tests' own jhash2 (tests/helpers/fidelity_ref.py)."""
from __future__ import annotations

from futextrace.analysis import lockwaits as C
from futextrace.output.text.explain_advice import advice_words
from tests.helpers.fidelity_ref import private_bucket

BASE = 0x7E0000000000


def _pair(same: bool) -> tuple[int, int]:
    a = BASE + 64
    b = next(BASE + 64 * i for i in range(2, 1000)
             if (private_bucket(BASE + 64 * i, 15) == private_bucket(a, 15)) == same)
    return a, b


def row(tgid, bucket, uaddr, waits, ns, mask=15):
    return {"tgid": tgid, "hash_mask": mask, "bucket": bucket, "uaddr": uaddr, "waits": waits,
            "wait_ns": ns, "max_ns": ns // max(waits, 1)}


def rec_of(rows, window=2.0):
    return {"contention": C.section(rows, {}, window, "attached (tp_btf)", {1: "w"})}


def test_split_by_cause():
    a, b = _pair(True)
    rows = [row(1, 3, a, 10, 1000), row(1, 3, b, 5, 500), row(1, 7, a + 4, 4, 400), row(1, 9, 0, 1, 100)]
    c = rec_of(rows)["contention"]
    p = c["processes"][0]
    assert p["by_cause"]["collision"] == {"waits": 15, "wait_ns": 1500}
    assert p["by_cause"]["same_futex"] == {"waits": 4, "wait_ns": 400}
    assert p["by_cause"]["unknown"] == {"waits": 1, "wait_ns": 100}
    assert c["waits"] == 20 and p["buckets"][0]["bucket"] == 3


def test_collision_advice_names_the_separating_size():
    a, b = _pair(True)
    bk = private_bucket(a, 15)
    r = rec_of([row(1, bk, a, 1000, 40_000_000), row(1, bk, b, 1000, 40_000_000)])
    adv = advice_words(C.advice(1, r, 16))
    size = adv["slots"]
    assert private_bucket(a, size - 1) != private_bucket(b, size - 1)
    assert all(private_bucket(a, s - 1) == private_bucket(b, s - 1)
               for s in (32, 64, 128, 256, 512, 1024, 2048, 4096) if s < size)
    assert f"at {size} buckets those futexes no longer share" in adv["effect"]
    assert "collisions cost 40.00 ms/s" in adv["effect"] and f"bucket {bk}" in adv["effect"]


def test_one_futex_says_more_buckets_will_not_help():
    a, _ = _pair(True)
    adv = advice_words(C.advice(1, rec_of([row(1, private_bucket(a, 15), a, 500, 5_000_000)]), 16))
    assert adv["slots"] is None and "more buckets will not help" in adv["effect"]


def test_nothing_measurable():
    a, _ = _pair(True)
    adv = advice_words(C.advice(1, rec_of([row(1, 2, a, 3, 30_000)]), 16))     # 0.015 ms/s
    assert adv["slots"] is None and "costs nothing measurable" in adv["effect"]
    assert "costs nothing measurable" in advice_words(C.advice(2, rec_of([]), 64))["effect"]


def test_no_size_when_futexes_never_part_below_the_limit():
    a = BASE + 64
    b = next(BASE + 64 * i for i in range(2, 5000)
             if private_bucket(BASE + 64 * i, 15) == private_bucket(a, 15)
             and private_bucket(BASE + 64 * i, 31) == private_bucket(a, 31))
    assert C.separating_size([a, b], [a, b], 16, max_slots=32) is None
    assert C.separating_size([a, b], [a, b], 16) > 32
    assert C.separating_size([], [a], 16) is None


def test_live_interval_rates_and_causes():
    from futextrace.output.text.live_text import wait_lines
    from futextrace.record.lockwaits_live import IntervalWaits
    a, b = _pair(True)
    d = IntervalWaits()
    first = d.interval([row(1, 3, a, 10, 2_000_000)], 1.0, {1: "w"})
    assert first["wait_ms_per_s"] == 2.0 and first["by_cause_ms_per_s"]["same_futex"] == 2.0
    # b joins the bucket: from now on its waits are collision; a's earlier ones stay where they were
    second = d.interval([row(1, 3, a, 20, 4_000_000), row(1, 3, b, 5, 1_000_000)], 0.5, {1: "w"})
    assert second["waits"] == 15 and second["wait_ms_per_s"] == 6.0
    assert second["by_cause_ms_per_s"] == {"collision": 6.0, "same_futex": 0.0, "unknown": 0.0}
    assert second["top_buckets"][0]["bucket"] == 3 and second["processes"][0]["comm"] == "w"
    assert "collision 6.0" in wait_lines({"lock_waits": second})[0]
    assert d.interval([row(1, 3, a, 20, 4_000_000)], 1.0, {})["waits"] == 0


def test_sweep_figures():
    a, b = _pair(True)
    r = rec_of([row(7, 3, a, 10, 2_000_000), row(7, 3, b, 10, 2_000_000)], window=2.0)
    assert C.process_figures(r, 7) == {"lock wait ms/s": 2.0, "collision ms/s": 2.0}
    assert C.process_figures(r, 8) == {"lock wait ms/s": 0.0, "collision ms/s": 0.0}
    assert C.process_figures(r, 7, private=False) == {"lock wait ms/s": "n/a", "collision ms/s": "n/a"}
    assert C.process_figures({"processes": []}, 7) == {}


def test_record_text():
    from futextrace.output.text.lockwaits_text import lockwait_lines
    a, b = _pair(True)
    text = "\n".join(lockwait_lines(rec_of([row(1, 3, a, 10, 2_000_000), row(1, 3, b, 5, 1_000_000)])["contention"]))
    assert "15 waits, 3.000 ms in 2.00 s (1.5 ms/s); collision 15 waits 3.000 ms" in text
    assert f"{hex(a)} (10), {hex(b)} (5)" in text and "collision" in text
    assert lockwait_lines({"status": "not attached: turned off"}) == ["", "Bucket-lock waits: not attached: turned off"]


def test_record_text_names_the_buckets_it_leaves_out():
    """Seven buckets with waits, five rows: a line says what the other two hold,
    so the rows add up to the process's total (a MariaDB run showed 5 of 11
    buckets with no word about the rest)."""
    from futextrace.output.text.lockwaits_text import lockwait_lines
    a, _ = _pair(True)
    rows = [row(1, bucket, a + 64 * bucket, 10 + bucket, (bucket + 1) * 1_000_000) for bucket in range(7)]
    text = "\n".join(lockwait_lines(rec_of(rows)["contention"]))
    assert "... 2 more buckets with 21 waits, 3.000 ms (all in the JSON)" in text, text
    assert "same_futex" not in text


def test_exporter_series_never_go_backwards_and_stay_bounded():
    from futextrace.export.lockwaits import LockWaitSeries
    a, b = _pair(True)
    book = LockWaitSeries()
    book.update([row(1, 3, a, 10, 1000), row(2, 5, a, 4, 400)], labelled={1})
    fam = {tuple(s.labels.values()): s.value for s in book.families({1}, lambda t: "w")[0].samples}
    assert fam[("1", "w", "same_futex")] == 10 and fam[("", "other", "same_futex")] == 4
    # b joins bucket 3: its new waits (and a's new ones) are collision; same_futex keeps its 10
    book.update([row(1, 3, a, 12, 1200), row(1, 3, b, 3, 300), row(2, 5, a, 4, 400)], labelled={1})
    waits = {tuple(s.labels.values()): s.value for s in book.families({1}, lambda t: "w")[0].samples}
    assert waits[("1", "w", "same_futex")] == 10 and waits[("1", "w", "collision")] == 5
    assert waits[("", "other", "same_futex")] == 4
    book.forget({1})
    assert not any(s.labels["pid"] == "1" for s in book.families(set(), lambda t: "w")[0].samples)


def test_small_wait_rate_in_the_total_unit():
    """25.7 us in 10 s reads as 2.57 us/s, not 0.00257 ms/s (a MariaDB run's line)."""
    from futextrace.output.text.lockwaits_text import lockwait_lines
    a, _ = _pair(True)
    text = "\n".join(lockwait_lines(rec_of([row(1, 3, a, 3, 30_000)])["contention"]))
    assert "3 waits, 30.0 us in 2.00 s (15 us/s)" in text, text


def test_one_wait_book_serves_the_live_view_and_the_exporter():
    """record -i and serve feed the same rows to the same WaitBook: the same new waits,
    with the same cause, come out of both."""
    from futextrace.export.lockwaits import LockWaitSeries
    from futextrace.record.lockwaits_live import IntervalWaits
    a, b = _pair(True)
    feeds = [[row(1, 3, a, 10, 1000)], [row(1, 3, a, 12, 1500), row(1, 3, b, 2, 100)]]
    live, series = IntervalWaits(), LockWaitSeries()
    for rows in feeds:
        live_causes = live.interval(rows, 1.0, {})["by_cause_ms_per_s"]
        series.update(rows, labelled={1})
    ns = {c: v[1] for c, v in series.own[1].items()}
    assert ns == {"collision": 600, "same_futex": 1000, "unknown": 0}
    assert live_causes["collision"] == round(600 / 1e6, 3) and live_causes["same_futex"] == 0.0
    assert C.cause_of({a, b}) == "collision" and C.cause_of({a}) == "same_futex" and C.cause_of({0}) == "unknown"
