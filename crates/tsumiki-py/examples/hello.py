"""The README's Python example: tsumiki as a dbm database, a transaction, and a shelf."""

import os
import shelve
import tempfile

import tsumiki

with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "fruit.db")

    # Flags as dbm.open: 'r' read-only, 'w' read-write, 'c' create if missing, 'n' new.
    with tsumiki.open(path, "c") as db:
        db["apple"] = "red"  # str is stored as UTF-8; values come back as bytes
        db[b"banana"] = b"yellow"
        print(db["apple"], db.keys())  # b'red' [b'apple', b'banana']

        # Several operations as one transaction: committed when the block ends, rolled
        # back if it raises; tsumiki.ConflictError if another transaction got in the way.
        with db.transaction() as t:
            t["cherry"] = t["apple"] + b" and round"
            del t["banana"]
        assert db.keys() == [b"apple", b"cherry"]

    # shelve stores any picklable Python object.
    with shelve.Shelf(tsumiki.open(os.path.join(tmp, "shelf.db"), "c")) as shelf:
        shelf["basket"] = {"apples": 3, "pears": [1, 2]}
    with shelve.Shelf(tsumiki.open(os.path.join(tmp, "shelf.db"), "r")) as shelf:
        print(shelf["basket"])  # {'apples': 3, 'pears': [1, 2]}
        assert shelf["basket"]["pears"] == [1, 2]
