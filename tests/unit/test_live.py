"""The live view's per-interval arithmetic on hand-made snapshots."""
from futextrace.kernel.layout import KIND
from futextrace.output.text import live_text
from futextrace.record import live


def futex(tgid, uaddr, lookups, bucket, kind="FT_PRIVATE", mask=63, cpus=2):
    per_cpu = [[0, 0, 0, 0, 0] for _ in range(cpus)]
    per_cpu[1] = [lookups, 0, bucket, -1, 0xFFFFFFFF]
    return {"tgid": tgid, "kind": KIND[kind], "uaddr": uaddr, "hash_mask": mask, "per_cpu": per_cpu}


def test_rates_come_from_the_difference_between_snapshots():
    before = live.futex_counts([futex(10, 0x1000, 100, 3), futex(10, 0x2000, 50, 5)])
    # 0x1000 appears twice (map and per-CPU cache): the two are added.
    after = live.futex_counts([futex(10, 0x1000, 150, 3), futex(10, 0x1000, 50, 3),
                           futex(10, 0x2000, 50, 5), futex(10, 0x3000, 20, 5),
                           futex(20, 0x9000, 8, 0, kind="FT_GLOBAL", mask=0)])
    rows = live.processes(before, after, 2.0, {10: "app"})
    assert [r["pid"] for r in rows] == [10, 20]
    app = rows[0]
    assert app["lookups"] == 100 + 20 and app["lookups_per_s"] == 60
    assert (app["hash"], app["futexes"], app["buckets_touched"]) == ("private 64", 2, 2)
    assert app["max_over_mean"] == 100 / 60
    assert (rows[1]["comm"], rows[1]["hash"]) == ("?", "global")


def test_idle_interval_lists_nobody():
    snap = live.futex_counts([futex(10, 0x1000, 100, 3)])
    assert live.processes(snap, snap, 1.0, {}) == []
    lines = live_text.render({"t": 1.0, "interval_s": 1.0, "lookups": 0, "private": 0, "global": 0,
                         "unattributed": 5, "lost_events": 0, "resizes": 2}, [], False)
    assert lines == ["+1.0s  lookups/s 0  (private 0/s, global 0/s)  resizes so far 2"
                     "  unattributed 5 (map full)"]


def test_skipped_probe_runs_are_shown():
    lines = live_text.render({"t": 2.0, "interval_s": 1.0, "lookups": 10, "private": 10, "global": 0,
                         "unattributed": 0, "lost_events": 0, "missed_runs": 7, "resizes": 0}, [], False)
    assert lines[0].endswith("skipped probe runs 7")


def test_the_totals_line_gives_rates_not_counts():
    lines = live_text.render({"t": 2.0, "interval_s": 0.5, "lookups": 300, "private": 200, "global": 100,
                         "unattributed": 0, "lost_events": 0, "resizes": 1}, [], False)
    assert lines == ["+2.0s  lookups/s 600  (private 400/s, global 200/s)  resizes so far 1"]
