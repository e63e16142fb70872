"""Memory of a process tree from /proc (Linux): summed PSS and RSS of a process and all its
descendants (e.g. DataLoader worker processes)."""

from __future__ import annotations

import os


def proc_tree(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, []))
    return out


def tree_mem_kib(root: int) -> tuple[int, int, int]:
    """(sum of PSS KiB, sum of RSS KiB, number of processes) over root and its descendants."""
    pss = rss = n = 0
    for pid in proc_tree(root):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1])
                    elif line.startswith("Rss:"):
                        rss += int(line.split()[1])
            n += 1
        except (OSError, ValueError):
            continue
    return pss, rss, n
