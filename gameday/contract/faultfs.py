"""The fault filesystem's vocabulary: the operations a rule can select and the errors it
may inject (:mod:`gameday.node.faultfs` serves them; ``gameday.kinds.storage`` validates
against them)."""

import errno

__all__ = ["ERRNOS", "OPERATIONS", "OPERATION_GROUPS"]

#: Operations a rule can select (the FUSE operations the fault filesystem serves).
OPERATIONS = ("getattr", "access", "readdir", "readlink", "open", "create", "read", "write",
              "flush", "fsync", "release", "truncate", "unlink", "mkdir", "rmdir", "rename",
              "link", "symlink", "chmod", "chown", "utimens", "statfs")
#: Shorthands for groups of operations.
OPERATION_GROUPS: dict[str, tuple[str, ...]] = {
    "all": OPERATIONS,
    "data": ("read", "write", "fsync", "flush"),
    "metadata": ("getattr", "access", "readdir", "readlink", "statfs"),
}
#: Error numbers a rule may inject, by name.
ERRNOS = {"EIO": errno.EIO, "ENOSPC": errno.ENOSPC, "EACCES": errno.EACCES,
          "EROFS": errno.EROFS, "EDQUOT": errno.EDQUOT}
