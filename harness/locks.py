"""File locks that leave no file behind: `fcntl.flock` on a lock file that its holder removes
while it still holds it. A process that was waiting on the removed file finds, once it holds
it, that the path no longer names it, and takes the lock again on a new file; so no two
processes ever hold the lock at once, and a lock file exists only while someone holds (or
waits for) it. A process killed while holding leaves its file, unlocked: the next holder
takes it and removes it."""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path


class Lock:
    """An exclusive lock on `path` (a file created there while held)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._fd: int | None = None

    def acquire(self, wait: bool = True) -> bool:
        """Take the lock, waiting for its holder (`wait`) or not; whether it was taken."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                return False
            except BaseException:
                os.close(fd)
                raise
            try:
                now = os.stat(self.path)
            except FileNotFoundError:
                now = None
            held = os.fstat(fd)
            if now is not None and (now.st_ino, now.st_dev) == (held.st_ino, held.st_dev):
                self._fd = fd
                return True
            os.close(fd)  # its holder removed it before this process got it: take the new one

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            self.path.unlink(missing_ok=True)  # while still held: see the module's docstring
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


@contextmanager
def exclusive(path: Path):
    """`with exclusive(path):` the block runs while this process alone holds the lock."""
    lock = Lock(path)
    lock.acquire()
    try:
        yield
    finally:
        lock.release()
