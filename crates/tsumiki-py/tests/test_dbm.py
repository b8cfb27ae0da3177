"""Tests of the tsumiki module, adapted from what CPython's own dbm tests check
(Lib/test/test_dbm.py, test_dbm_gnu.py, test_shelve.py), plus its transactions."""

import errno
import os
import pathlib
import shelve
import stat
import subprocess
import sys
import threading
import time

import pytest

import tsumiki

# The records of CPython's AnyDBMTestCase.
_dict = {
    "a": b"Python:",
    "b": b"Programming",
    "c": b"the",
    "d": b"way",
    "f": b"Guido",
    "g": b"intended",
}


@pytest.fixture
def fname(tmp_path):
    return str(tmp_path / "db")


def init_db(fname):
    with tsumiki.open(fname, "n") as f:
        for k in _dict:
            f[k.encode("ascii")] = _dict[k]


def keys_helper(f):
    keys = sorted(k.decode("ascii") for k in f.keys())
    assert keys == sorted(_dict)
    return keys


def read_helper(f):
    keys_helper(f)
    for key in _dict:
        assert f[key.encode("ascii")] == _dict[key]


# --- dbm's behaviour (test_dbm.py's AnyDBMTestCase) ---------------------------------------


def test_error_is_oserror():
    assert issubclass(tsumiki.error, OSError)
    assert issubclass(tsumiki.ConflictError, tsumiki.error)


def test_not_existing(fname):
    with pytest.raises(tsumiki.error) as e:
        tsumiki.open(fname)
    assert e.value.errno == 2 and e.value.filename == fname
    with pytest.raises(tsumiki.error):
        tsumiki.open(fname, "w")
    assert not os.path.exists(fname), "'r' and 'w' must not create anything"


def test_creation(fname):
    f = tsumiki.open(fname, "c")
    assert list(f.keys()) == []
    for key in _dict:
        f[key.encode("ascii")] = _dict[key]
    read_helper(f)
    f.close()


def test_creation_n_file_exists_with_invalid_contents(fname):
    open(fname, "wb").close()  # an empty file
    with tsumiki.open(fname, "n") as f:
        assert len(f) == 0


def test_n_truncates(fname):
    init_db(fname)
    with tsumiki.open(fname, "n") as f:
        assert len(f) == 0 and f.keys() == []
        f[b"new"] = b"1"
    with tsumiki.open(fname, "r") as f:
        assert f.keys() == [b"new"]


def test_n_refuses_what_is_not_a_database(tmp_path):
    # 'n' empties a tsumiki database; it must not wipe some other file or directory.
    other = tmp_path / "notes.txt"
    other.write_bytes(b"keep me")
    with pytest.raises(tsumiki.error):
        tsumiki.open(str(other), "n")
    assert other.read_bytes() == b"keep me"
    d = tmp_path / "dir"
    d.mkdir()
    (d / "file").write_bytes(b"keep me too")
    with pytest.raises(tsumiki.error):
        tsumiki.open(str(d), "n")
    assert os.listdir(d) == ["file"]


def test_w_opens_existing(fname):
    init_db(fname)
    with tsumiki.open(fname, "w") as f:
        read_helper(f)
        f[b"g"] = b"indented"
    with tsumiki.open(fname, "r") as f:
        assert f[b"g"] == b"indented"


def test_modification(fname):
    init_db(fname)
    d = dict(_dict)
    f = tsumiki.open(fname, "c")
    d["g"] = f[b"g"] = b"indented"
    for key in d:
        assert f[key.encode("ascii")] == d[key]
    # setdefault() works as in the dict interface
    assert f.setdefault(b"xxx", b"foo") == b"foo"
    assert f[b"xxx"] == b"foo"
    assert f.setdefault(b"xxx", b"bar") == b"foo"
    f.close()


def test_read(fname):
    init_db(fname)
    f = tsumiki.open(fname, "r")
    read_helper(f)
    # get() works as in the dict interface
    assert f.get(b"a") == _dict["a"]
    assert f.get(b"xxx", b"foo") == b"foo"
    assert f.get(b"xxx") is None
    with pytest.raises(KeyError) as e:
        f[b"xxx"]
    assert e.value.args == (b"xxx",)
    f.close()


def test_keys_sorted(fname):
    init_db(fname)
    with tsumiki.open(fname, "r") as f:
        assert keys_helper(f) == sorted(_dict)
        assert f.keys() == sorted(f.keys())  # in key order
        assert list(f) == f.keys()


def test_empty_value(fname):
    f = tsumiki.open(fname, "c")
    assert f.keys() == []
    f[b"empty"] = b""
    assert f.keys() == [b"empty"]
    assert b"empty" in f
    assert f[b"empty"] == b""
    assert f.get(b"empty") == b""
    assert f.setdefault(b"empty") == b""
    assert f.setdefault(b"absent") == b""
    assert f[b"absent"] == b""
    f.close()


def test_access(fname):
    init_db(fname)
    with tsumiki.open(fname, "r") as f:
        assert b"a" in f
        assert f[b"a"] == b"Python:"


class FakePath:
    """os_helper.FakePath: an os.PathLike returning str or bytes."""

    def __init__(self, path):
        self.path = path

    def __fspath__(self):
        return self.path


def test_open_with_bytes(fname):
    tsumiki.open(os.fsencode(fname), "c").close()
    with tsumiki.open(fname, "r") as f:
        assert len(f) == 0


def test_open_with_pathlike(fname):
    tsumiki.open(pathlib.Path(fname), "c").close()
    tsumiki.open(FakePath(fname), "w").close()
    tsumiki.open(FakePath(os.fsencode(fname)), "r").close()


def test_keys(fname):
    with tsumiki.open(fname, "c") as d:
        assert d.keys() == []
        a = [(b"a", b"b"), (b"12345678910", b"019237410982340912840198242")]
        for k, v in a:
            d[k] = v
        assert sorted(d.keys()) == sorted(k for (k, v) in a)
        for k, v in a:
            assert k in d
            assert d[k] == v
        assert b"xxx" not in d
        with pytest.raises(KeyError):
            d[b"xxx"]


def test_clear(fname):
    with tsumiki.open(fname, "c") as d:
        assert d.keys() == []
        a = [(b"a", b"b"), (b"12345678910", b"019237410982340912840198242")]
        for k, v in a:
            d[k] = v
        for k, _ in a:
            assert k in d
        assert len(d) == len(a)
        d.clear()
        assert len(d) == 0
        for k, _ in a:
            assert k not in d


def test_delete(fname):
    with tsumiki.open(fname, "c") as d:
        d["k"] = "v"
        del d["k"]
        assert "k" not in d
        with pytest.raises(KeyError) as e:
            del d["k"]
        assert e.value.args == ("k",)


# --- dbm.gnu's behaviour (test_dbm_gnu.py) ------------------------------------------------


def test_key_methods(fname):
    g = tsumiki.open(fname, "c")
    assert g.keys() == []
    g["a"] = "b"
    g["12345678910"] = "019237410982340912840198242"
    g[b"bytes"] = b"data"
    key_set = set(g.keys())
    assert key_set == {b"a", b"bytes", b"12345678910"}
    assert "a" in g
    assert b"a" in g
    assert g[b"bytes"] == b"data"
    assert set(g) == key_set
    assert g.get(b"a") == b"b"
    assert g.get(b"xxx") is None
    assert g.get(b"xxx", b"foo") == b"foo"
    with pytest.raises(KeyError):
        g["xxx"]
    assert g.setdefault(b"xxx", b"foo") == b"foo"
    assert g[b"xxx"] == b"foo"
    g.close()


def test_error_conditions(fname):
    with pytest.raises(tsumiki.error):
        tsumiki.open(fname, "r")
    g = tsumiki.open(fname, "c")
    g.close()
    with pytest.raises(tsumiki.error):
        g["a"]
    with pytest.raises(ValueError):
        tsumiki.open(fname, "rx")
    with pytest.raises(ValueError):
        tsumiki.open(fname, "c", 0o10000)


def test_flags(fname):
    for flag in "cnrw":  # 'c' first
        g = tsumiki.open(fname, flag)
        g.close()


def test_reorganize(fname):
    with tsumiki.open(fname, "c") as g:
        g["x"] = "x" * 10000
        g["y"] = "y"
        del g["x"]
        g.reorganize()
        assert g.keys() == [b"y"]
    with tsumiki.open(fname, "r") as g:
        assert g.keys() == [b"y"] and g[b"y"] == b"y"


def test_context_manager(fname):
    with tsumiki.open(fname, "c") as db:
        db["tsumiki context manager"] = "context manager"
    with tsumiki.open(fname, "r") as db:
        assert list(db.keys()) == [b"tsumiki context manager"]
    with pytest.raises(tsumiki.error) as cm:
        db.keys()
    assert str(cm.value) == "the tsumiki database has already been closed"


def test_bytes(fname):
    with tsumiki.open(fname, "c") as db:
        db[b"bytes key \xbd"] = b"bytes value \xbd"
    with tsumiki.open(fname, "r") as db:
        assert list(db.keys()) == [b"bytes key \xbd"]
        assert b"bytes key \xbd" in db
        assert db[b"bytes key \xbd"] == b"bytes value \xbd"


def test_unicode(fname):
    with tsumiki.open(fname, "c") as db:
        db["Unicode key \U0001f40d"] = "Unicode value \U0001f40d"
    with tsumiki.open(fname, "r") as db:
        assert list(db.keys()) == ["Unicode key \U0001f40d".encode()]
        assert "Unicode key \U0001f40d".encode() in db
        assert "Unicode key \U0001f40d" in db
        assert db["Unicode key \U0001f40d".encode()] == "Unicode value \U0001f40d".encode()
        assert db["Unicode key \U0001f40d"] == "Unicode value \U0001f40d".encode()


def test_nonascii_filename(tmp_path):
    filename = str(tmp_path / "\u00e4\u00f6\u00fc-\U0001f40d")
    with tsumiki.open(filename, "c") as db:
        db[b"key"] = b"value"
    assert os.path.exists(filename)
    with tsumiki.open(filename, "r") as db:
        assert list(db.keys()) == [b"key"]
        assert db[b"key"] == b"value"


# --- types, modes, handles ----------------------------------------------------------------


def test_bytes_like_accepted_other_types_refused(fname):
    with tsumiki.open(fname, "c") as db:
        db[bytearray(b"ba")] = memoryview(b"mv")
        db[memoryview(b"xmvx")[1:3]] = bytearray(b"ba")
        assert db[b"ba"] == b"mv" and db[b"mv"] == b"ba"
        assert type(db[b"ba"]) is bytes
        for bad in (1, None, 1.5, ["a"], object()):
            with pytest.raises(TypeError):
                db[bad] = b"v"
            with pytest.raises(TypeError):
                db[b"k"] = bad
            with pytest.raises(TypeError):
                db[bad]
            with pytest.raises(TypeError):
                bad in db
        with pytest.raises(TypeError):
            db.setdefault(b"k", None)
        with pytest.raises(UnicodeEncodeError):
            db["\udc80"] = b"lone surrogate"
        assert db.keys() == [b"ba", b"mv"]


def test_mode(tmp_path):
    old = os.umask(0o022)
    try:
        a, b = str(tmp_path / "a"), str(tmp_path / "b")
        tsumiki.open(a, "c").close()
        tsumiki.open(b, "n", 0o640).close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(a).st_mode) == 0o755  # 0o666 plus search bits, less umask
    assert stat.S_IMODE(os.stat(b).st_mode) == 0o750
    for name in os.listdir(b):  # the data files are private whatever the mode
        assert stat.S_IMODE(os.stat(os.path.join(b, name)).st_mode) & 0o077 == 0, name


def test_read_only_refuses_writes(fname):
    init_db(fname)
    with tsumiki.open(fname, "r") as db:
        with pytest.raises(tsumiki.error):
            db[b"a"] = b"changed"
        with pytest.raises(tsumiki.error):
            del db[b"a"]
        with pytest.raises(tsumiki.error):
            db.setdefault(b"new", b"v")
        with pytest.raises(tsumiki.error):
            db.clear()
        with pytest.raises(tsumiki.error):
            with db.transaction() as t:
                t[b"b"] = b"changed"
        assert db.setdefault(b"a", b"v") == _dict["a"]  # reading is fine
        read_helper(db)
    with tsumiki.open(fname, "r") as db:
        read_helper(db)


def test_one_handle_at_a_time(fname):
    with tsumiki.open(fname, "c"):
        with pytest.raises(tsumiki.error):
            tsumiki.open(fname, "r")
    tsumiki.open(fname, "r").close()


def test_every_use_after_close_raises(fname):
    db = tsumiki.open(fname, "c")
    db[b"k"] = b"v"
    it = iter(db)
    db.close()
    db.close()  # idempotent
    uses = [
        lambda: db[b"k"],
        lambda: db.__setitem__(b"k", b"v"),
        lambda: db.__delitem__(b"k"),
        lambda: b"k" in db,
        lambda: len(db),
        lambda: list(db),
        lambda: next(it),
        lambda: db.keys(),
        lambda: db.get(b"k"),
        lambda: db.setdefault(b"k"),
        lambda: db.clear(),
        lambda: db.sync(),
        lambda: db.reorganize(),
        lambda: db.transaction(),
    ]
    for use in uses:
        with pytest.raises(tsumiki.error):
            use()
    with tsumiki.open(fname, "r") as db:  # the handle really let go of the database
        assert db[b"k"] == b"v"


def test_iteration_over_batches(fname):
    n = 2500  # more than two of the iterator's batches of 1024
    with tsumiki.open(fname, "c") as db:
        with db.transaction() as t:
            for i in range(n):
                t[b"%05d" % i] = b"v"
            assert list(t) == [b"%05d" % i for i in range(n)]
            assert len(t) == n
        assert list(db) == [b"%05d" % i for i in range(n)]
        assert len(db) == n and len(db.keys()) == n
        db.clear()
        assert len(db) == 0 and list(db) == []


def test_every_write_is_durable_without_close(fname):
    # A process that stores and then exits without closing (no flush at exit) loses nothing.
    code = (
        "import os, tsumiki\n"
        f"db = tsumiki.open({fname!r}, 'c')\n"
        "db[b'k'] = b'v'\n"
        "with db.transaction() as t:\n"
        "    t[b't'] = b'w'\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    with tsumiki.open(fname, "r") as db:
        assert db[b"k"] == b"v" and db[b"t"] == b"w"


# --- shelve (test_shelve.py) --------------------------------------------------------------


def test_shelve_round_trip(fname):
    value = {
        "list": [1, 2.5, "three", b"four", None, True],
        "nested": {"a": [{"b": (1, 2)}, {3, 4}], "c": {"d": {"e": frozenset({"f"})}}},
        "unicode \U0001f40d": "\u00e9t\u00e9",
    }
    s = shelve.Shelf(tsumiki.open(fname, "c"))
    s["key1"] = value
    s["key2"] = [value, value]
    s["\u00e9"] = 42
    assert len(s) == 3
    assert "key1" in s and "nope" not in s
    assert s["key1"] == value
    del s["key2"]
    assert sorted(s) == ["key1", "\u00e9"]
    s.sync()
    s.close()

    with shelve.Shelf(tsumiki.open(fname, "r")) as s:
        assert s["key1"] == value
        assert s["\u00e9"] == 42
        assert s.get("key2") is None
        assert dict(s) == {"key1": value, "\u00e9": 42}


def test_shelve_writeback(fname):
    with shelve.Shelf(tsumiki.open(fname, "c"), writeback=True) as s:
        s["key1"] = [1, 2, 3]
        s["key1"].append(4)  # kept in the cache, written at sync/close
    with shelve.Shelf(tsumiki.open(fname, "w"), writeback=False) as s:
        assert s["key1"] == [1, 2, 3, 4]
        s["key1"].append(5)  # not written back
    with shelve.Shelf(tsumiki.open(fname, "r")) as s:
        assert s["key1"] == [1, 2, 3, 4]


# --- transactions -------------------------------------------------------------------------


def test_transaction_commits(fname):
    with tsumiki.open(fname, "c") as db:
        db[b"old"] = b"1"
        with db.transaction() as t:
            t[b"a"] = b"1"
            t["b"] = "2"
            del t[b"old"]
            assert t[b"a"] == b"1" and b"old" not in t  # reads see its own writes
            assert b"a" not in db and db[b"old"] == b"1"  # others do not, yet
            assert t.keys() == [b"a", b"b"] and len(t) == 2
            assert t.setdefault(b"c", b"3") == b"3"
        assert db.keys() == [b"a", b"b", b"c"]
    with tsumiki.open(fname, "r") as db:
        assert db.keys() == [b"a", b"b", b"c"]


def test_transaction_durability(fname):
    with tsumiki.open(fname, "c") as db:
        with pytest.raises(ValueError):
            db.transaction(durability="sometimes")
        for level in ("none", "buffered", "sync"):
            with db.transaction(durability=level) as t:
                t[level] = b"1"
        db.sync()  # the commits kept in memory too
    with tsumiki.open(fname, "r") as db:
        assert db.keys() == [b"buffered", b"none", b"sync"]


class Boom(Exception):
    pass


def test_transaction_aborts_on_exception(fname):
    init_db(fname)
    with tsumiki.open(fname, "w") as db:
        with pytest.raises(Boom):
            with db.transaction() as t:
                t[b"a"] = b"changed"
                del t[b"b"]
                t[b"new"] = b"x"
                raise Boom()
        read_helper(db)
        assert b"new" not in db
    with tsumiki.open(fname, "r") as db:
        read_helper(db)


def test_transaction_conflict(fname):
    # Two transactions interleaved on one handle: both read k, both write it. The first
    # commit wins; the second must fail, as no serial order explains it.
    with tsumiki.open(fname, "c") as db:
        db[b"k"] = b"0"
        with pytest.raises(tsumiki.ConflictError):
            with db.transaction() as t2:
                with db.transaction() as t1:
                    assert t1[b"k"] == b"0" and t2[b"k"] == b"0"
                    t1[b"k"] = b"1"
                    t2[b"k"] = b"2"
                # t1 committed here; t2 commits when its block ends.
        assert db[b"k"] == b"1"
        with pytest.raises(tsumiki.error):
            t2[b"k"]  # over


def test_transaction_conflict_on_absent_key(fname):
    # Both see k absent and insert it: the second must not commit (no lost insert).
    with tsumiki.open(fname, "c") as db:
        t1, t2 = db.transaction(), db.transaction()
        assert t1.get(b"k") is None and t2.get(b"k") is None
        t1[b"k"], t2[b"k"] = b"1", b"2"
        t1.commit()
        with pytest.raises(tsumiki.ConflictError):
            t2.commit()
        assert db[b"k"] == b"1"


def test_transaction_over_after_block(fname):
    with tsumiki.open(fname, "c") as db:
        with db.transaction() as t:
            t[b"k"] = b"v"
        for use in (lambda: t[b"k"], lambda: t.__setitem__(b"k", b"w"), lambda: len(t), t.commit):
            with pytest.raises(tsumiki.error) as e:
                use()
            assert not isinstance(e.value, tsumiki.ConflictError)
        t.abort()  # a no-op once over
        assert db[b"k"] == b"v"
        t = db.transaction()
        t[b"k"] = b"w"
        t.abort()
        assert db[b"k"] == b"v"


def test_caught_conflict_does_not_pass_silently(fname):
    # A block that catches the ConflictError and ends normally did not commit: say so.
    with tsumiki.open(fname, "c") as db:
        db[b"k"] = b"0"
        other = db.transaction()
        other[b"k"]
        with pytest.raises(tsumiki.ConflictError):
            with db.transaction() as t:
                t[b"k"]
                t[b"k"] = b"1"
                other[b"k"] = b"2"
                other.commit()
                try:
                    t.commit()
                except tsumiki.ConflictError:
                    pass
        assert db[b"k"] == b"2"


def test_close_rolls_back_open_transactions(fname):
    db = tsumiki.open(fname, "c")
    t = db.transaction()
    t[b"uncommitted"] = b"x"
    db.close()
    with pytest.raises(tsumiki.error):
        t[b"more"] = b"y"
    with pytest.raises(tsumiki.error):
        with t:
            pass
    with tsumiki.open(fname, "r") as db:
        assert db.keys() == []


def test_threads_run_transactions(fname):
    # Threads increment counters in transactions, retrying conflicts: nothing is lost.
    threads, rounds = 4, 25
    with tsumiki.open(fname, "c") as db:
        db[b"n"] = b"0"
        conflicts = []

        def work():
            for _ in range(rounds):
                while True:
                    try:
                        with db.transaction() as t:
                            t[b"n"] = str(int(t[b"n"]) + 1)
                        break
                    except tsumiki.ConflictError:
                        conflicts.append(1)

        ts = [threading.Thread(target=work) for _ in range(threads)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        assert int(db[b"n"]) == threads * rounds


def test_gil_released_in_engine_calls(fname):
    # With a switch interval far too long to preempt anyone, another Python thread runs
    # only when this one lets go of the GIL: the engine calls (commits and their fsync)
    # must do so.
    old = sys.getswitchinterval()
    sys.setswitchinterval(100)
    try:
        with tsumiki.open(fname, "c") as db:
            stop = threading.Event()
            ticks = []

            def ticker():
                while not stop.is_set():
                    ticks.append(1)
                    time.sleep(0.0001)  # lets the GIL go back

            th = threading.Thread(target=ticker)
            th.start()
            try:
                before = len(ticks)
                for i in range(20):
                    db[b"k%d" % i] = b"v"
                during = len(ticks) - before
            finally:
                stop.set()
                th.join()
            assert during > 0
    finally:
        sys.setswitchinterval(old)


# --- the open-flag table and the error mapping shared with the C library -----------------

# flag -> outcome on (a database holding b"k", an empty file, an empty directory, nothing):
# "kept" (opened, b"k" there), "empty" (opened, no keys), or the errno of the tsumiki.error.
# The same table as the C library's test (open_table in tests/c/dbm_test.c, where 'r' is
# O_RDONLY, 'w' O_RDWR, 'c' O_RDWR|O_CREAT, 'n' O_RDWR|O_CREAT|O_TRUNC) and its header.
OPEN_TABLE = {
    "r": ("kept", errno.ENOENT, errno.ENOENT, errno.ENOENT),
    "w": ("kept", errno.ENOENT, errno.ENOENT, errno.ENOENT),
    "c": ("kept", "empty", "empty", "empty"),
    "n": ("empty", "empty", "empty", "empty"),
}


def test_open_flag_table(tmp_path):
    for flag, want in OPEN_TABLE.items():
        for i, situation in enumerate(["database", "empty file", "empty directory", "nothing"]):
            path = tmp_path / f"{flag}-{i}"
            if situation == "database":
                with tsumiki.open(path, "c") as db:
                    db[b"k"] = b"v"
            elif situation == "empty file":
                path.write_bytes(b"")
            elif situation == "empty directory":
                path.mkdir()
            try:
                with tsumiki.open(path, flag) as db:
                    got = "kept" if b"k" in db else "empty"
                    assert len(db) == (1 if got == "kept" else 0)
            except tsumiki.error as e:
                assert e.filename == str(path)
                got = e.errno
            assert got == want[i], f"{flag!r} on {situation}: {got}"
            if isinstance(got, int) and situation == "nothing":
                assert not path.exists()


def test_full_disk_is_enospc():
    # A real full disk: TSUMIKI_FULL_DIR names a small file system of its own (.ci/python.sh
    # runs this test in a 16 MiB tmpfs mounted in a mount namespace). A ballast file written
    # first is removed before the reopen (the administrator freeing space).
    small = os.environ.get("TSUMIKI_FULL_DIR")
    if small is None:
        if os.environ.get("TSUMIKI_FULL_DIR_REQUIRED"):
            pytest.fail("TSUMIKI_FULL_DIR is not set")
        pytest.skip("needs TSUMIKI_FULL_DIR, a small file system (.ci/python.sh mounts one)")
    small = pathlib.Path(small)
    ballast = small / "ballast"
    with open(ballast, "xb") as f:
        f.write(b"b" * (2 << 20))
        os.fsync(f.fileno())
    path = small / "full"
    db = tsumiki.open(path, "c")
    value = b"v" * (64 << 10)
    acked = 0
    with pytest.raises(OSError) as e:
        while acked < 4000:
            db[str(acked)] = value
            acked += 1
    assert acked > 0
    assert isinstance(e.value, tsumiki.error)
    assert e.value.errno == errno.ENOSPC, e.value
    with pytest.raises(OSError) as e:
        db[b"later"] = b"x"
    assert e.value.errno == errno.ENOSPC, "every later write: the first cause"
    with pytest.raises(OSError) as e:
        db.close()  # closed, but it reports that the last writes may be lost
    assert e.value.errno == errno.ENOSPC
    ballast.unlink()
    with tsumiki.open(path, "r") as db:
        assert len(db) == acked
        assert all(db[str(i)] == value for i in range(acked))


def test_errors_carry_the_c_errno(tmp_path):
    path = tmp_path / "db"
    with tsumiki.open(path, "c") as db:
        with pytest.raises(tsumiki.error) as e:
            db[b"x" * 5000] = b"v"
        assert e.value.errno == errno.EINVAL
        with pytest.raises(tsumiki.error) as e:
            tsumiki.open(path, "w")  # open already
        assert e.value.errno == errno.EAGAIN
    with tsumiki.open(path, "r") as db:
        with pytest.raises(tsumiki.error) as e:
            db[b"k"] = b"v"
        assert e.value.errno == errno.EPERM


def _files(path):
    """Every file of the database directory: bytes and mtime (and the directory's mtime)."""
    out = {".": (b"", os.stat(path).st_mtime_ns)}
    for name in os.listdir(path):
        p = os.path.join(path, name)
        with open(p, "rb") as f:
            out[name] = (f.read(), os.stat(p).st_mtime_ns)
    return out


_RO_CHILD = """
import errno, sys, tsumiki
path, n = sys.argv[1], int(sys.argv[2])
try:
    open(path + "/probe", "x")
    sys.exit("the mount is writable")
except OSError as e:
    assert e.errno == errno.EROFS, e
with tsumiki.open(path, "r") as db, tsumiki.open(path, "r") as second:
    assert len(db) == n and len(second) == n
    assert all(db[str(i)] == b"v%d" % i for i in range(n))
    try:
        db[b"k"] = b"v"
        sys.exit("a write went through")
    except tsumiki.error as e:
        assert e.errno == errno.EPERM, e
print("read-only ok")
"""


def test_read_only_open_on_a_read_only_mount(tmp_path):
    # 'r' writes nothing: it opens on a read-only bind mount (in a user and mount
    # namespace of its own), reads every record, a second 'r' beside it, and the files are
    # unchanged byte for byte.
    path = tmp_path / "db"
    with tsumiki.open(path, "c") as db:
        for i in range(500):
            db[str(i)] = b"v%d" % i
    before = _files(path)
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 97; shift; exec "$@"'
    r = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", str(path),
         sys.executable, "-c", _RO_CHILD, str(path), "500"],
        capture_output=True, text=True,
    )
    # 97: the mount failed; unshare's own failure names it first.
    if r.returncode == 97 or (r.returncode != 0 and r.stderr.startswith("unshare:")):
        if os.environ.get("TSUMIKI_RO_REQUIRED") == "1":
            pytest.fail(f"TSUMIKI_RO_REQUIRED=1 but no read-only mount: {r.stderr}")
        pytest.skip(f"user and mount namespaces unavailable: {r.stderr.strip()}")
    assert r.returncode == 0 and "read-only ok" in r.stdout, r.stdout + r.stderr
    assert _files(path) == before
