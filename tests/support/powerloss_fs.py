"""A FUSE file system that loses, at a simulated power cut, everything that was not fsynced.

Run as a process of its own: ``python tests/support/powerloss_fs.py MOUNTPOINT``. It mounts an empty file
system there, held in this process's memory, and takes commands on stdin (one per line; replies on
stdout, one JSON object per line):

    arm KIND N [PREFIX]  cut the power right before the N-th KIND operation (create, mkdir, write,
                         truncate, rename, link, unlink, rmdir, fsync, fsyncdir, or any) on a path under
                         PREFIX. Replies {"frozen": ...} when it happens: that operation and every
                         later one fail with EIO and change nothing (the machine is off).
    cut MODE SEED        unmount, keep only what survives the power cut (MODE below), mount again;
                         replies {"mounted": ...} with what was lost. Kill the processes that use the
                         mount first: a live process would go on writing, and keeps the mount busy.
    stop                 unmount and exit (also on end of input, SIGTERM or SIGINT).

The model, per inode (the rules a POSIX file system promises, and no more; cf. LazyFS):

- A file has its current bytes and its durable bytes. ``fsync``/``fdatasync`` of the file makes
  the current bytes (and size) durable. Closing a file persists nothing.
- A directory has its current entries (name -> inode) and its durable entries. ``fsync`` of the
  directory makes its current entries durable: creations, renames and unlinks in it. A new file
  or directory is reachable after a cut only if the entry in its parent was made durable, and its
  parent's entry in turn, up to the root.
- At a cut, MODE says which changes reached the disk by themselves (a kernel writes back on its
  own schedule, and a real cut may land after any part of that):
    none    nothing that was not fsynced survives;
    meta    every directory change survives (a journal committed the metadata), and so does every
            file's size, but not the bytes written since the file's last fsync: they read as the
            bytes durable before, zeros past their end;
    random  each directory keeps a random prefix of its changes since its last fsync (a rename is
            one change), each file either none, its new size with zeros, a random mix of its new
            and durable 4 KiB pages at its new size, or all of its new bytes.
  Then the current state of every inode is replaced by its durable state, and inodes no durable
  entry leads to are gone. The file system is unmounted and mounted again, so the kernel keeps no
  cached view of the lost state.

Attributes other than the size (mode, times, link count) are treated as always durable; nothing
the cold tier or SQLite relies on depends on them. Symbolic links are not supported.
"""

from __future__ import annotations

import errno
import json
import os
import queue
import random
import stat
import subprocess
import sys
import threading
import time

import mfusepy as fuse

PAGE = 4096
KINDS = {
    "create",
    "mkdir",
    "write",
    "truncate",
    "rename",
    "link",
    "unlink",
    "rmdir",
    "fsync",
    "fsyncdir",
    "any",
}
_out_lock = threading.Lock()


def say(**msg) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


class Node:
    """An inode. A file: ``data`` (current) and ``disk`` (durable) bytes. A directory: ``entries``
    (current) and ``disk_entries`` (durable), and ``log``, the changes made since its last fsync,
    in order; each is a list of (name, node or None) applied together."""

    _next_ino = 1

    def __init__(self, mode: int):
        self.ino = Node._next_ino
        Node._next_ino += 1
        self.mode = mode
        self.mtime = time.time_ns()
        if self.is_dir:
            self.entries: dict = {}
            self.disk_entries: dict = {}
            self.log: list = []
        else:
            self.data = bytearray()
            self.disk = b""

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    def change(self, *changes) -> None:
        """Change current entries: (name, node) adds or replaces, (name, None) removes."""
        for name, node in changes:
            if node is None:
                self.entries.pop(name, None)
            else:
                self.entries[name] = node
        self.log.append(changes)
        self.mtime = time.time_ns()


class PowerLossFS(fuse.Operations):
    use_ns = True

    def __init__(self):
        self.root = Node(stat.S_IFDIR | 0o755)
        self.root.disk_entries = {}
        self.handles: dict = {}
        self._next_fh = 1
        self.armed = None  # (kind, countdown, prefix)
        self.dead = False

    # -- the power cut ------------------------------------------------------------------------------

    def arm(self, kind: str, n: int, prefix: str) -> None:
        self.armed = [kind, n, prefix]

    def cut(self, mode: str, seed: int) -> dict:
        """Keep only what survives; returns what was lost (for the test's report): directory entries
        that differ from what the disk has, and files whose bytes do."""
        rng = random.Random(seed)
        nodes = self._all_nodes()
        for node in nodes:  # what reached the disk by itself
            if node.is_dir:
                keep = len(node.log) if mode == "meta" else 0
                if mode == "random":
                    keep = rng.randint(0, len(node.log))
                for changes in node.log[:keep]:
                    for name, child in changes:
                        if child is None:
                            node.disk_entries.pop(name, None)
                        else:
                            node.disk_entries[name] = child
            elif node.data != node.disk and mode != "none":
                how = "zeros" if mode == "meta" else rng.choice(("none", "zeros", "torn", "all"))
                node.disk = _written_back(bytes(node.data), node.disk, how, rng)
        lost = {"names": 0, "files": 0}
        for node in nodes:
            if node.is_dir:
                lost["names"] += len(set(node.entries.items()) ^ set(node.disk_entries.items()))
            elif node.data != node.disk:
                lost["files"] += 1
        for node in self._durable_nodes():
            if node.is_dir:
                node.entries, node.log = dict(node.disk_entries), []
            else:
                node.data = bytearray(node.disk)
        self.handles.clear()
        self.armed, self.dead = None, False
        return lost

    def _all_nodes(self) -> list:
        """Every inode reachable by a current or a durable entry, and every open one."""
        seen, todo = {}, [self.root] + list(self.handles.values())
        while todo:
            node = todo.pop()
            if node.ino in seen:
                continue
            seen[node.ino] = node
            if node.is_dir:
                todo.extend(node.entries.values())
                todo.extend(node.disk_entries.values())
        return list(seen.values())

    def _durable_nodes(self) -> list:
        seen, todo = {}, [self.root]
        while todo:
            node = todo.pop()
            if node.ino not in seen:
                seen[node.ino] = node
                if node.is_dir:
                    todo.extend(node.disk_entries.values())
        return list(seen.values())

    def _op(self, kind: str, path) -> None:
        """Every operation passes here first: a dead machine answers EIO; an armed cut fires."""
        if self.dead:
            raise fuse.FuseOSError(errno.EIO)
        if (
            self.armed
            and kind != "read"
            and self.armed[0] in (kind, "any")
            and (path or "").startswith(self.armed[2])
        ):
            self.armed[1] -= 1
            if self.armed[1] <= 0:
                self.dead = True
                say(frozen={"before": kind, "path": path})
                raise fuse.FuseOSError(errno.EIO)

    # -- lookups ------------------------------------------------------------------------------------

    def _lookup(self, path: str) -> Node:
        node = self.root
        for part in path.split("/"):
            if part:
                if not node.is_dir:
                    raise fuse.FuseOSError(errno.ENOTDIR)
                node = node.entries.get(part)
                if node is None:
                    raise fuse.FuseOSError(errno.ENOENT)
        return node

    def _parent(self, path: str):
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self._lookup(head or "/")
        if not parent.is_dir:
            raise fuse.FuseOSError(errno.ENOTDIR)
        return parent, name

    def _node(self, path, fh) -> Node:
        if fh:
            node = self.handles.get(fh)
            if node is not None:
                return node
        if path is None:
            raise fuse.FuseOSError(errno.EBADF)
        return self._lookup(path)

    def _handle(self, node: Node) -> int:
        fh, self._next_fh = self._next_fh, self._next_fh + 1
        self.handles[fh] = node
        return fh

    # -- FUSE operations ----------------------------------------------------------------------------

    def init(self, path):
        say(mounted=getattr(self, "last_cut", {}))

    def getattr(self, path, fh=None):
        self._op("read", path)
        node = self._node(path, fh)
        size = 4096 if node.is_dir else len(node.data)
        return {
            "st_mode": node.mode,
            "st_ino": node.ino,
            "st_nlink": 2 if node.is_dir else 1,
            "st_size": size,
            "st_blocks": (size + 511) // 512,
            "st_blksize": PAGE,
            "st_uid": os.getuid(),
            "st_gid": os.getgid(),
            "st_atime": node.mtime,
            "st_mtime": node.mtime,
            "st_ctime": node.mtime,
        }

    def statfs(self, path):
        self._op("read", path)
        return {
            "f_bsize": PAGE,
            "f_frsize": PAGE,
            "f_blocks": 1 << 20,
            "f_bfree": 1 << 19,
            "f_bavail": 1 << 19,
            "f_files": 1 << 20,
            "f_ffree": 1 << 19,
            "f_namemax": 255,
        }

    def readdir(self, path, fh):
        self._op("read", path)
        node = self._node(path, fh)
        return [".", ".."] + list(node.entries)

    def opendir(self, path):
        self._op("read", path)
        node = self._lookup(path)
        if not node.is_dir:
            raise fuse.FuseOSError(errno.ENOTDIR)
        return self._handle(node)

    def releasedir(self, path, fh):
        self.handles.pop(fh, None)
        return 0

    def fsyncdir(self, path, datasync, fh):
        self._op("fsyncdir", path)
        node = self._node(path, fh)
        node.disk_entries, node.log = dict(node.entries), []
        return 0

    def mkdir(self, path, mode):
        self._op("mkdir", path)
        parent, name = self._parent(path)
        if name in parent.entries:
            raise fuse.FuseOSError(errno.EEXIST)
        parent.change((name, Node(stat.S_IFDIR | (mode & 0o7777))))
        return 0

    def rmdir(self, path):
        self._op("rmdir", path)
        parent, name = self._parent(path)
        node = self._lookup(path)
        if not node.is_dir:
            raise fuse.FuseOSError(errno.ENOTDIR)
        if node.entries:
            raise fuse.FuseOSError(errno.ENOTEMPTY)
        parent.change((name, None))
        return 0

    def create(self, path, mode, flags=0):
        self._op("create", path)
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is None:
            node = Node(stat.S_IFREG | (mode & 0o7777))
            parent.change((name, node))
        elif flags & os.O_EXCL:
            raise fuse.FuseOSError(errno.EEXIST)
        return self._handle(node)

    def open(self, path, flags):
        self._op("read", path)
        node = self._lookup(path)
        if flags & os.O_TRUNC and flags & (os.O_WRONLY | os.O_RDWR):
            self.truncate(path, 0)
        return self._handle(node)

    def release(self, path, fh):
        self.handles.pop(fh, None)
        return 0

    def flush(self, path, fh):
        return 0

    def read(self, path, size, offset, fh):
        self._op("read", path)
        return bytes(self._node(path, fh).data[offset : offset + size])

    def write(self, path, data, offset, fh):
        self._op("write", path)
        node = self._node(path, fh)
        if offset > len(node.data):
            node.data.extend(bytes(offset - len(node.data)))
        node.data[offset : offset + len(data)] = data
        node.mtime = time.time_ns()
        return len(data)

    def truncate(self, path, length, fh=None):
        self._op("truncate", path)
        node = self._node(path, fh)
        if node.is_dir:
            raise fuse.FuseOSError(errno.EISDIR)
        if length < len(node.data):
            del node.data[length:]
        else:
            node.data.extend(bytes(length - len(node.data)))
        node.mtime = time.time_ns()
        return 0

    def fsync(self, path, datasync, fh):
        self._op("fsync", path)
        node = self._node(path, fh)
        node.disk = bytes(node.data)
        return 0

    def unlink(self, path):
        self._op("unlink", path)
        parent, name = self._parent(path)
        if self._lookup(path).is_dir:
            raise fuse.FuseOSError(errno.EISDIR)
        parent.change((name, None))
        return 0

    def rename(self, old, new):
        self._op("rename", new)
        src, old_name = self._parent(old)
        dst, new_name = self._parent(new)
        node = self._lookup(old)
        target = dst.entries.get(new_name)
        if target is not None and target.is_dir and (not node.is_dir or target.entries):
            raise fuse.FuseOSError(errno.EISDIR if not node.is_dir else errno.ENOTEMPTY)
        if src is dst:
            src.change((new_name, node), (old_name, None))  # one change: a rename is atomic
        else:
            dst.change((new_name, node))
            src.change((old_name, None))
        return 0

    def link(self, target, source):
        self._op("link", target)
        node = self._lookup(source)
        parent, name = self._parent(target)
        if node.is_dir:
            raise fuse.FuseOSError(errno.EPERM)
        if name in parent.entries:
            raise fuse.FuseOSError(errno.EEXIST)
        parent.change((name, node))
        return 0

    def chmod(self, path, mode):
        self._op("read", path)
        node = self._lookup(path)
        node.mode = (node.mode & ~0o7777) | (mode & 0o7777)
        return 0

    def chown(self, path, uid, gid):
        self._op("read", path)
        return 0

    def utimens(self, path, times=None):
        self._op("read", path)
        self._lookup(path).mtime = times[1] if times else time.time_ns()
        return 0

    def access(self, path, amode):
        self._op("read", path)
        self._lookup(path)
        return 0


def _written_back(new: bytes, old: bytes, how: str, rng: random.Random) -> bytes:
    """What the disk holds of a file whose ``new`` bytes were not fsynced over ``old``."""
    if how == "none":
        return old
    if how == "all":
        return new
    base = old[: len(new)].ljust(len(new), b"\0")  # the new size, old bytes or zeros
    if how == "zeros":
        return base
    pages = [
        new[i : i + PAGE] if rng.random() < 0.5 else base[i : i + PAGE] for i in range(0, len(new), PAGE)
    ]
    return b"".join(pages)


def _unmount(mountpoint: str) -> None:
    for _ in range(50):  # busy while the killed processes' files are being released
        if subprocess.run(["fusermount3", "-u", mountpoint], capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    say(error=f"cannot unmount {mountpoint}")


def _control(fs: PowerLossFS, mountpoint: str, commands: "queue.Queue") -> None:
    """Read commands; arm now, or queue a cut/stop for the main thread and unmount."""
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "arm" and len(words) in (3, 4) and words[1] in KINDS:
            fs.arm(words[1], int(words[2]), words[3] if len(words) == 4 else "/")
            say(armed=words[1:])
        elif words[0] == "cut" and len(words) == 3 and words[1] in ("none", "meta", "random"):
            commands.put(("cut", words[1], int(words[2])))
            _unmount(mountpoint)
        elif words[0] == "stop":
            break
        else:
            say(error=f"bad command {line.strip()!r}")
    commands.put(("stop",))
    _unmount(mountpoint)


def main(argv) -> int:
    mountpoint = os.path.abspath(argv[1])
    fs = PowerLossFS()
    commands: "queue.Queue" = queue.Queue()
    threading.Thread(target=_control, args=(fs, mountpoint, commands), daemon=True).start()
    while True:
        # One thread serves requests (-s): no locks, and an armed cut fires at an exact point.
        # auto_unmount: if this process dies, fusermount3 unmounts the directory.
        fuse.FUSE(
            fs,
            mountpoint,
            foreground=True,
            nothreads=True,
            hard_remove=True,
            auto_unmount=True,
            fsname="powerloss",
            subtype="powerloss",
        )
        try:
            command = commands.get(timeout=5)
        except queue.Empty:  # unmounted by someone else, or a signal
            return 0
        if command[0] == "stop":
            return 0
        fs.last_cut = fs.cut(command[1], command[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
