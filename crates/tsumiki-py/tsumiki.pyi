"""tsumiki: a transactional key-value database with the interface of Python's dbm
modules (so shelve works on it), plus transactions."""

import os
from types import TracebackType
from typing import Iterator, List, Literal, Optional, Type, TypeVar, Union, final, overload

__all__ = ["open", "error", "ConflictError", "Database", "Transaction", "KeyIterator", "__version__"]

__version__: str

_Data = Union[bytes, bytearray, memoryview, str]
"""A key or value: bytes-like, or str (stored as UTF-8)."""

_T = TypeVar("_T")

class error(OSError):
    """Raised for every failure of the database: a missing database, a closed handle, a
    write to a database opened read-only, I/O errors. Its errno is the one the C library
    sets for the same failure: ENOSPC for a full disk (also from a database it poisoned),
    ENOENT no database, EEXIST something that may not be replaced, EPERM read-only, EAGAIN
    open elsewhere (or a conflict), EINVAL a bad argument or too long a key or value, EFBIG
    a transaction over the 1 GiB log record limit, EIO a damaged database."""

class ConflictError(error):
    """A transaction conflicted with another one and was rolled back; running it again
    may succeed."""

def open(
    file: Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"],
    flag: Literal["r", "w", "c", "n"] = "r",
    mode: int = 0o666,
) -> Database:
    """Opens the database in directory `file`, as `dbm.open`: 'r' read-only (must exist),
    'w' read-write (must exist), 'c' read-write created if missing, 'n' always new and
    empty. `mode` is the created directory's mode (search bits added where read bits are,
    the umask applied). A missing database raises `error` (errno ENOENT). An empty file
    counts as no database ('c' and 'n' replace it); the rules are the C library's dbm_open
    rules (the table is in its header)."""

@final
class Database:
    """An open tsumiki database: a mapping of bytes keys to bytes values. Each operation
    is its own durable, serializable transaction; `transaction()` groups several. Closes
    on leaving a `with` block. Safe to share between threads."""

    def __getitem__(self, key: _Data, /) -> bytes:
        """The value of `key`; KeyError if absent."""
    def __setitem__(self, key: _Data, value: _Data, /) -> None:
        """Stores `value` under `key` (durable when it returns)."""
    def __delitem__(self, key: _Data, /) -> None:
        """Deletes `key`; KeyError if absent."""
    def __contains__(self, key: _Data, /) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[bytes]:
        """The keys in order, fetched in batches (each batch a transaction)."""
    @overload
    def get(self, key: _Data) -> Optional[bytes]: ...
    @overload
    def get(self, key: _Data, default: _T) -> Union[bytes, _T]: ...
    def setdefault(self, key: _Data, default: _Data = b"") -> bytes:
        """The value of `key`; if absent, stores `default` and returns it."""
    def keys(self) -> List[bytes]:
        """Every key, in order, read in one transaction."""
    def clear(self) -> None:
        """Deletes every key (a batch of keys per transaction)."""
    def sync(self) -> None:
        """Makes every commit so far durable (also those of transactions that chose less
        than a sync)."""
    def reorganize(self) -> None:
        """Takes a checkpoint, so that the next open replays less log."""
    def transaction(self, durability: Optional[Literal["sync", "buffered", "none"]] = None) -> Transaction:
        """Begins a transaction (a context manager: commits at the end of the block, rolls
        back if it raises). `durability`: "sync" (the default), "buffered" (handed to the
        operating system) or "none" (in memory until a later synced commit)."""
    def close(self) -> None:
        """Rolls back open transactions and closes; idempotent. Later use raises `error`."""
    def __enter__(self) -> Database: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
        /,
    ) -> bool: ...

@final
class Transaction:
    """A transaction from `Database.transaction()`, with the mapping methods of
    `Database` acting inside it. Commits when its `with` block ends normally, rolls back
    when it raises; a conflict raises `ConflictError`. Unusable once ended."""

    def __getitem__(self, key: _Data, /) -> bytes: ...
    def __setitem__(self, key: _Data, value: _Data, /) -> None: ...
    def __delitem__(self, key: _Data, /) -> None: ...
    def __contains__(self, key: _Data, /) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[bytes]: ...
    @overload
    def get(self, key: _Data) -> Optional[bytes]: ...
    @overload
    def get(self, key: _Data, default: _T) -> Union[bytes, _T]: ...
    def setdefault(self, key: _Data, default: _Data = b"") -> bytes: ...
    def keys(self) -> List[bytes]: ...
    def clear(self) -> None: ...
    def commit(self) -> None:
        """Commits (durable when it returns); `ConflictError` on a conflict."""
    def abort(self) -> None:
        """Rolls back; a no-op if the transaction already ended."""
    def __enter__(self) -> Transaction: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
        /,
    ) -> bool: ...

@final
class KeyIterator(Iterator[bytes]):
    """An iterator over keys, in order."""

    def __iter__(self) -> KeyIterator: ...
    def __next__(self) -> bytes: ...
